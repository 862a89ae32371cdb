package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// A workflow's confirmation is one decision: its hash's, checked against the request's deadline
// (with the caller's Finally, an Idempotency-Key's answer, in the same round trip). The nodes are
// confirmed after it, without a deadline. Each node's confirmation checked the deadline on its
// own in one pipeline before: a Redis stall that split the pipeline confirmed the workflow and
// some nodes before the deadline and refused the rest, so the workflow ran in part, the request
// was answered outcome_unknown, and a retry with the same key created it again (a probe saw 167
// of 250 nodes run twice). A node this misses (Redis failed just after the decision, the process
// died) the workflow sweep confirms; its record outlives the workflow's claim by
// workflowNodeGrace for that.

// workflowNodeGrace is how much longer a new node's record lives unconfirmed than its workflow's
// claim: time for the workflow sweep (every rescue interval, 2 s by default) to confirm it.
const workflowNodeGrace = 2 * time.Minute

// confirmWorkflow sends workflow w's confirmation, created being what it made: its status, werr
// when the replicas did not acknowledge it (durable mode), err when its answer did not come.
func (s *Stack) confirmWorkflow(ctx context.Context, w WorkflowSpec, created WorkflowCreated) (status string, werr, err error) {
	_, cluster := s.rdb.(*redis.ClusterClient)
	durable := s.store.Durability()
	var wc jobstore.WorkflowConfirmation
	// One node runs the pipeline in order: a Finally command conditional on created.Decision runs
	// only if the confirmation took. In durable mode the pipeline ends with a WAIT.
	werr = durable.Exec(ctx, s.rdb, func(pipe redis.Pipeliner) {
		wc = s.store.QueueWorkflowConfirm(ctx, pipe, created.ID, s.store.WriteDeadline(ctx))
		if !cluster && w.Finally != nil {
			decided := created
			decided.Decision = s.store.WorkflowKey(created.ID)
			w.Finally(ctx, pipe, decided)
		}
	})
	if status, err = wc.Result(); err != nil || status != "confirmed" {
		return status, nil, err
	}
	if cluster && w.Finally != nil {
		// Its commands' answers are the caller's to read (the app stores its answer again when it
		// was not stored): a failure here is no failure of the workflow, which stands.
		_ = durable.Exec(ctx, s.rdb, func(pipe redis.Pipeliner) { w.Finally(ctx, pipe, created) })
	}
	return status, werr, nil
}

// errNodesRefused: Redis answered every node's confirmation, and some refused it (their records
// are gone: the sweep counts those nodes expired). Trying again changes nothing.
var errNodesRefused = errors.New("engine: workflow nodes' records refused their confirmation")

// pendingNode is a node of a confirmed workflow whose record is not confirmed yet, or (again) one
// whose confirmation is sent again for its WAIT only: it is not indexed again.
type pendingNode struct {
	keys  jobstore.Keys
	id    string
	tags  []string
	again bool
}

// confirmNodes confirms the records of nodes, of a workflow of tenant that is confirmed, in one
// pipeline without a deadline (the workflow's decided), with their indexes, and then takes
// workflow wfID out of the set of workflows whose nodes are not confirmed. werr: the replicas did
// not acknowledge it (durable mode); err: a confirmation's answer did not come, or a record was
// gone (its node counts as expired then: the sweep). It waits for Redis at most until ctx's
// deadline and a second past it: a failure is the sweep's to finish.
func (s *Stack) confirmNodes(ctx context.Context, wfID, tenant string, nodes []pendingNode) (werr, err error) {
	if len(nodes) == 0 {
		return nil, nil
	}
	limit := time.Now().Add(fairWaitTimeout)
	if d, ok := ctx.Deadline(); ok {
		limit = d.Add(time.Second)
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), limit)
	defer cancel()
	now := s.now()
	durable := s.store.Durability()
	// EVAL in durable mode: a NOSCRIPT retry would come after the WAIT, uncovered by it.
	queueConfirm := s.store.QueueConfirmSha
	if durable.On() {
		queueConfirm = s.store.QueueConfirm
	}
	confirms := make([]jobstore.Confirmation, len(nodes))
	werr = durable.Exec(ctx, s.rdb, func(pipe redis.Pipeliner) {
		for i, n := range nodes {
			confirms[i] = queueConfirm(ctx, pipe, n.keys, n.id, 0, 0)
			if !n.again {
				s.store.QueueIndex(ctx, pipe, tenant, n.id, n.tags, now)
				s.store.QueueExpiry(ctx, pipe, n.id, s.store.ExpiryDue(now, time.Time{}))
			}
		}
	})
	var failed, refused []string
	for i, c := range confirms {
		cs, cerr := c.Result()
		switch {
		case cerr != nil:
			failed = append(failed, nodes[i].id+": "+cerr.Error())
		case cs != jobstore.Confirmed:
			refused = append(refused, nodes[i].id+": "+string(cs))
		}
	}
	if len(failed) > 0 {
		return werr, fmt.Errorf("engine: %d workflow nodes not confirmed: %s", len(failed)+len(refused), strings.Join(append(failed, refused...), "; "))
	}
	if len(refused) > 0 {
		return werr, fmt.Errorf("%w: %s", errNodesRefused, strings.Join(refused, "; "))
	}
	if werr != nil {
		// The replicas did not acknowledge them (durable mode): reported to the caller. The
		// workflow stays in the set until a sweep's confirmations of its nodes are acknowledged
		// (confirmPending sends them again, or confirms them anew after a failover that lost them).
		return werr, nil
	}
	// Only once every confirmation answered (on a cluster the set's slot is on another master, and
	// a NOSCRIPT retry runs after the pipeline): the sweep no longer needs to look at it.
	return nil, s.store.NodesConfirmed(ctx, wfID)
}

// confirmPending confirms the records of workflow w's open nodes (states being theirs) that are
// not confirmed yet: the workflow is, and the process that confirmed it died before its nodes (or
// Redis failed then). A node whose record is gone is left to the sweep's expiry of it.
func (s *Stack) confirmPending(ctx context.Context, w jobstore.WorkflowRecord, open []jobstore.WorkflowNodeState, states []jobstore.NodeRecord, unconfirmed bool) error {
	// In durable mode a workflow of the set of unconfirmed ones may have had its nodes confirmed
	// by a sweep whose WAIT the replicas refused: found confirmed on the master, they are not yet
	// known to be on a replica. Their confirmations go again (the script writes the same values),
	// so that this sweep's WAIT covers them before the workflow leaves the set.
	again := unconfirmed && s.store.Durability().On()
	var pending []pendingNode
	for i, n := range open {
		st := states[i]
		switch {
		case st.Status != "" && !st.Confirmed:
			pending = append(pending, pendingNode{keys: keysOr(s, n.JobID), id: n.JobID, tags: st.Tags})
		case again && st.Status != "" && !st.Status.Terminal():
			pending = append(pending, pendingNode{keys: keysOr(s, n.JobID), id: n.JobID, again: true})
		}
	}
	werr, err := s.confirmNodes(ctx, w.ID, w.Tenant, pending)
	if err != nil {
		return err
	}
	if werr != nil {
		return fmt.Errorf("engine: workflow %s: its nodes' confirmations: %w", w.ID, werr)
	}
	if n := len(pending) - countAgain(pending); n > 0 {
		s.log.Info().Str("workflow_id", w.ID).Int("nodes", n).Str("event", "workflow_nodes_confirmed").
			Msg("the sweep confirmed a confirmed workflow's nodes")
	}
	return nil
}

// countAgain is how many of nodes were confirmed already (their confirmations sent again).
func countAgain(nodes []pendingNode) int {
	n := 0
	for _, p := range nodes {
		if p.again {
			n++
		}
	}
	return n
}

// unknownWorkflows are the settlements of workflows whose decision's answer was lost, running in
// the background; close stops them (the nodes' records then run out, or the sweep confirms them).
type unknownWorkflows struct {
	mu     sync.Mutex
	closed bool
	stop   chan struct{}
	wg     sync.WaitGroup
}

// add counts one settlement in, false once closed: a settlement is never added while close waits.
func (u *unknownWorkflows) add() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return false
	}
	u.wg.Add(1)
	return true
}

func (u *unknownWorkflows) close() {
	u.mu.Lock()
	if !u.closed {
		u.closed = true
		close(u.stop)
	}
	u.mu.Unlock()
	u.wg.Wait()
}

// unknownSettleTries bounds the tries, a second apart, to settle a workflow whose decision's
// answer was lost, while Redis does not answer.
const unknownSettleTries = 30

// settleUnknown settles, in the background, workflow created (of tenant) whose decision's answer
// did not come: wf_settle decides it atomically against its confirmation, so that no clock has to
// agree with Redis's. Confirmed, its nodes are confirmed; a claim (taken back now) or gone, its
// nodes are abandoned. Left to run out, they held their deliveries bouncing for 2 minutes, and a
// fair type's roots their keys' turns (a probe saw one tenant's fair jobs wait that long). It
// waits until ctx's deadline has passed first (without one, until the claim has run out), so that
// a confirmation still on its way lands rather than finds its workflow taken back.
func (s *Stack) settleUnknown(ctx context.Context, created WorkflowCreated, tenant string, nodes []pendingNode, abandon func() error) {
	after := time.Now().Add(claimTTL + time.Second)
	if d, ok := ctx.Deadline(); ok {
		after = d.Add(time.Second)
	}
	u := &s.unknown
	if !u.add() {
		return // closing: the nodes' records run out, or the sweep confirms them
	}
	go func() {
		defer u.wg.Done()
		wait := time.Until(after)
		for range unknownSettleTries {
			select {
			case <-u.stop:
				return
			case <-time.After(wait):
			}
			if s.settleOnce(created.ID, tenant, nodes, abandon) {
				return
			}
			wait = time.Second
		}
	}()
}

// settleOnce settles workflow id once; false when Redis did not answer (it is tried again).
func (s *Stack) settleOnce(id, tenant string, nodes []pendingNode, abandon func() error) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := s.store.SettleWorkflow(ctx, id)
	if err != nil {
		return false
	}
	if st != jobstore.WorkflowSettledConfirmed {
		if err := abandon(); err != nil {
			return false // tried again: the hash is gone now, and the nodes are abandoned then
		}
		s.log.Info().Str("workflow_id", id).Str("event", "workflow_not_created").
			Msg("a workflow whose confirmation's answer was lost was not confirmed; its nodes are abandoned")
		return true
	}
	_, err = s.confirmNodes(ctx, id, tenant, nodes)
	// A record that refused its confirmation is gone: the sweep counts its node expired. Only an
	// answer that did not come is worth another try.
	if err != nil && !errors.Is(err, errNodesRefused) {
		return false
	}
	s.log.Info().Str("workflow_id", id).Str("event", "workflow_created_settled").
		Msg("a workflow whose confirmation's answer was lost was confirmed; its nodes are confirmed")
	return true
}
