package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// nudgeTimeout bounds the work an ended node starts in its workflow (its children's releases and
// skips); what it leaves undone, the sweeper's repair pass does.
const nodeNudgeTimeout = 10 * time.Second

// endedIn is ended for a job that may be a workflow's node (workflow is its record's
// FieldWorkflow, or its delivery's HeaderWorkflow; "" none): the workflow is told, off the
// caller's goroutine. A process that dies before it does leaves that to the sweeper.
func (s *Stack) endedIn(id, workflow string) {
	s.ended(id)
	wfID, node, ok := jobstore.WorkflowOf(workflow)
	if !ok {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), nodeNudgeTimeout)
		defer cancel()
		k, err := s.store.Keys(id, "")
		if err != nil {
			return
		}
		st, err := s.store.Status(ctx, k)
		if err == nil && st.Terminal() {
			err = s.advance(ctx, s.wfClient, wfID, node, st)
		}
		if err != nil {
			s.log.Warn().Err(err).Str("workflow_id", wfID).Str("job_id", id).Msg("workflow not advanced; the sweeper will")
		}
	}()
}

// advance tells workflow wfID that node ended with status st, then acts on what that decided:
// children released (delivered) or skipped, and skipped children told in turn (transitively).
// Every step is idempotent (the node's end is noted once, a node is released or skipped only
// while held), so the ending process and the sweeper may both run it.
func (s *Stack) advance(ctx context.Context, client *asynq.Client, wfID, node string, st jobstore.Status) error {
	type end struct {
		node string
		st   jobstore.Status
	}
	queue := []end{{node, st}}
	for len(queue) > 0 {
		e := queue[0]
		queue = queue[1:]
		a, err := s.store.WorkflowEnded(ctx, wfID, e.node, e.st, s.now())
		if err != nil {
			return fmt.Errorf("engine: %w", err)
		}
		if a.State == "advanced" && workflowEnded(a.Status) {
			_ = s.store.UnindexWorkflow(ctx, wfID)
			s.log.Info().Str("workflow_id", wfID).Str("event", "workflow_"+a.Status).Msg("workflow ended")
		}
		for _, d := range a.Decisions {
			ended, err := s.decide(ctx, client, wfID, d)
			if err != nil {
				return err
			}
			if ended != "" {
				queue = append(queue, end{d.Node, ended})
			}
		}
	}
	return nil
}

// decide acts on one decision; it returns the node's status when the node has ended (skipped now,
// or ended before: cancelled, expired) and must be told to the workflow.
func (s *Stack) decide(ctx context.Context, client *asynq.Client, wfID string, d jobstore.WorkflowDecision) (jobstore.Status, error) {
	now := s.now()
	if d.Action == "skip" {
		skipped, st, err := s.store.SkipNode(ctx, d.JobID, "skipped: "+d.Why, now)
		if err != nil {
			return "", fmt.Errorf("engine: %w", err)
		}
		if skipped {
			typ := s.typeOf(ctx, d.JobID)
			s.m.transitions.WithLabelValues(typ, "skipped").Inc()
			s.ended(d.JobID)
			s.log.Info().Str("workflow_id", wfID).Str("job_id", d.JobID).Str("event", "skipped").Str("why", d.Why).Msg("workflow node skipped")
			return jobstore.StatusSkipped, nil
		}
		return terminalOr(st), nil
	}
	// The delivery first, then the release: a delivery that starts before the release is
	// written bounces (start.lua: held), and a process that dies in between leaves a node held
	// with no pending parent, which the sweeper releases. The other order left a queued job with
	// no delivery for the reconciler's grace (chaos-workflows found workflows waiting on it).
	info, err := s.store.ReleaseInfo(ctx, d.JobID)
	if err != nil {
		return "", fmt.Errorf("engine: %w", err)
	}
	if info.Status != jobstore.StatusHeld {
		return terminalOr(info.Status), nil
	}
	tc, ok := s.TaskConfig(info.Type)
	if !ok {
		return "", fmt.Errorf("%w: %q (workflow node %s)", ErrUnknownType, info.Type, d.JobID)
	}
	payload, err := s.openValue(d.JobID, jobstore.FieldPayload, info.Payload) // a limit key reads the plaintext
	if err != nil {
		return "", fmt.Errorf("engine: release %s: %w", d.JobID, err)
	}
	spec := Spec{Type: info.Type, Tenant: info.Tenant, Resource: info.Resource, Payload: payload, OpKey: info.OpKey}
	if tc.Fair != nil {
		return s.releaseFairNode(ctx, tc, wfID, d, spec, now)
	}
	if err := s.deliverNode(ctx, client, tc, s.recordQueue(tc.Queue, d.JobID, info.Queue), d.JobID, wfID+":"+d.Node, spec); err != nil {
		return "", err
	}
	r, err := s.store.ReleaseNode(ctx, d.JobID, now, false)
	if err != nil {
		return "", fmt.Errorf("engine: %w", err)
	}
	if !r.Released {
		return terminalOr(r.Status), nil
	}
	s.log.Info().Str("workflow_id", wfID).Str("job_id", d.JobID).Str("event", "released").Msg("workflow node released")
	return "", nil
}

// releaseFairNode releases a held node of a fairly dispatched type: it waits for its key's turn as
// an enqueued job does. The wait first (done once however often the release is decided), then the
// release (held -> waiting), then the delivery of what the wait admitted: a process that dies in
// between leaves a held node that the workflow sweep decides again, or an admitted waiting one
// that the fair sweep delivers.
func (s *Stack) releaseFairNode(ctx context.Context, tc TaskConfig, wfID string, d jobstore.WorkflowDecision, spec Spec, now time.Time) (jobstore.Status, error) {
	admitted, err := s.fairWait(ctx, tc, d.JobID, "", spec, wfID+":"+d.Node)
	if err != nil {
		return "", err
	}
	defer s.deliverAdmittedAtOnce(ctx, tc, admitted) // others' too: delivered whatever the release finds
	r, err := s.store.ReleaseNode(ctx, d.JobID, now, true)
	if err != nil {
		return "", fmt.Errorf("engine: %w", err)
	}
	if !r.Released {
		return terminalOr(r.Status), nil // its wait's admission is freed at its delivery's start
	}
	if keys, err := s.store.Keys(d.JobID, ""); err == nil {
		s.event(ctx, keys, fairWaitingEvent(tc, spec))
	}
	s.log.Info().Str("workflow_id", wfID).Str("job_id", d.JobID).Str("event", "released").Msg("workflow node released to wait for its key")
	return "", nil
}

// terminalOr is st when it is terminal, else "" (the node is still on its way).
func terminalOr(st jobstore.Status) jobstore.Status {
	if st.Terminal() {
		return st
	}
	return ""
}

func workflowEnded(status string) bool {
	return status == jobstore.WorkflowDone || status == jobstore.WorkflowFailed || status == jobstore.WorkflowCancelled
}

func (s *Stack) typeOf(ctx context.Context, id string) string {
	k, err := s.store.Keys(id, "")
	if err != nil {
		return ""
	}
	info, _ := s.store.CancelInfo(ctx, k)
	return info.Type
}

// workflowSweepBatch bounds how many running workflows one sweep pass repairs.
const workflowSweepBatch = 100

// SweepWorkflows is the workflows' repair pass (middleware's Guard.Run makes one every rescue
// interval): for each of up to 100 running workflows, the oldest first, every node whose end was
// not told (its process died between the end and the telling, or the end was the sweep's or the
// rescuer's) is told now, a held node whose parents have all ended is decided again (a process
// died between the decision and its act), and a cancelled workflow's nodes still not ended are
// cancelled; and first, the nodes of a confirmed workflow that a failure left unconfirmed are
// confirmed (workflow_confirm.go). It returns how many workflows it looked at.
func (s *Stack) SweepWorkflows(ctx context.Context) (int, error) {
	// First the workflows whose nodes a failure may have left unconfirmed (workflow_confirm.go),
	// whatever their age: their records run out 2 minutes after their creation.
	pending, err := s.store.WorkflowsUnconfirmed(ctx, workflowSweepBatch)
	if err != nil {
		return 0, fmt.Errorf("engine: %w", err)
	}
	var errs []error
	for _, id := range pending {
		err := s.repairWorkflow(ctx, id, true)
		if errors.Is(err, errWorkflowClaimed) {
			continue // its confirmation may not have landed yet (a cluster): looked at again later
		}
		if err == nil {
			err = s.store.NodesConfirmed(ctx, id)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	ids, err := s.store.RunningWorkflows(ctx, workflowSweepBatch)
	if err != nil {
		return len(pending), errors.Join(append(errs, fmt.Errorf("engine: %w", err))...)
	}
	for _, id := range ids {
		if slices.Contains(pending, id) {
			continue
		}
		if err := s.repairWorkflow(ctx, id, false); err != nil && !errors.Is(err, errWorkflowClaimed) {
			errs = append(errs, err)
		}
	}
	return len(pending) + len(ids), errors.Join(errs...)
}

// errWorkflowClaimed: the workflow is a claim still, its creation not decided. Its entries in the
// index and the set of unconfirmed workflows stay: on a cluster they live on another master than
// its hash and can land before its confirmation does. Once the claim runs out (or the creation
// gives up), the hash is gone and the sweep drops them.
var errWorkflowClaimed = errors.New("engine: workflow not confirmed yet")

// repairWorkflow brings workflow id's hash in line with its nodes' records; errWorkflowClaimed
// when it is a claim. unconfirmed: id came from the set of workflows whose nodes may not all be
// confirmed (confirmPending).
func (s *Stack) repairWorkflow(ctx context.Context, id string, unconfirmed bool) error {
	w, err := s.store.LoadWorkflow(ctx, id)
	if errors.Is(err, jobstore.ErrWorkflowClaimed) {
		return errWorkflowClaimed
	}
	if errors.Is(err, jobstore.ErrNotFound) {
		return s.store.UnindexWorkflow(ctx, id)
	}
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	if workflowEnded(w.Status) {
		return s.store.UnindexWorkflow(ctx, id)
	}
	var open []jobstore.WorkflowNodeState
	var ids []string
	for _, n := range w.Nodes {
		if n.Ended == "" {
			open, ids = append(open, n), append(ids, n.JobID)
		}
	}
	states, err := s.store.NodeRecords(ctx, ids)
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	if err := s.confirmPending(ctx, w, open, states, unconfirmed); err != nil {
		return err
	}
	for i, n := range open {
		st := states[i].Status
		if w.Cancelled && !st.Terminal() && st != "" {
			_, err := s.Cancel(ctx, n.JobID, CancelRequest{By: "workflow " + id, Why: "workflow cancelled"})
			if err != nil && !errors.Is(err, ErrEnded) && !errors.Is(err, ErrJobNotFound) {
				return err
			}
			if err == nil {
				st = jobstore.StatusCancelled
			} else if st, err = s.store.Status(ctx, keysOr(s, n.JobID)); err != nil {
				return fmt.Errorf("engine: %w", err)
			}
		}
		switch {
		case st == "":
			// The record is gone (it outlived the retention, or was deleted): the node will never
			// end, so it counts as expired.
			err = s.advance(ctx, s.wfClient, id, n.ID, jobstore.StatusExpired)
		case st.Terminal():
			err = s.advance(ctx, s.wfClient, id, n.ID, st)
		case st == jobstore.StatusHeld && n.Pending <= 0 && !w.Cancelled:
			var ended jobstore.Status
			ended, err = s.decide(ctx, s.wfClient, id, redecide(n))
			if err == nil && ended != "" {
				err = s.advance(ctx, s.wfClient, id, n.ID, ended)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// redecide is wf_ended's decision again, for a held node whose parents have all ended.
func redecide(n jobstore.WorkflowNodeState) jobstore.WorkflowDecision {
	d := jobstore.WorkflowDecision{Node: n.ID, JobID: n.JobID, Action: "release", Why: n.Why}
	if n.Why != "" && n.Policy != jobstore.PolicyAllEnded {
		d.Action = "skip"
	}
	return d
}

// CancelWorkflow cancels workflow id: from now on no node is released or skipped, and every node
// that has not ended is cancelled (a running one as Cancel does: fence raised, context cancelled).
// ErrWorkflowEnded when it had ended.
func (s *Stack) CancelWorkflow(ctx context.Context, id string) error {
	if !jobstore.ValidWorkflowID(id) {
		return fmt.Errorf("%w: %s", ErrWorkflowNotFound, id)
	}
	state, rest, err := s.store.MarkWorkflowCancelled(ctx, id)
	switch {
	case err != nil:
		return fmt.Errorf("engine: %w", err)
	case state == "gone":
		return fmt.Errorf("%w: %s", ErrWorkflowNotFound, id)
	case state == "ended":
		return fmt.Errorf("%w: it is %s", ErrWorkflowEnded, strings.Join(rest, ""))
	}
	return s.repairWorkflow(ctx, id, false)
}

// WorkflowView is a workflow and the status of each node's job.
type WorkflowView struct {
	jobstore.WorkflowRecord
	// NodeStatus is each node's job status, in the order of Nodes ("" when its record is gone).
	NodeStatus []jobstore.Status
}

// Workflow reads workflow id and its nodes' statuses (two round trips).
func (s *Stack) Workflow(ctx context.Context, id string) (WorkflowView, error) {
	w, err := s.store.LoadWorkflow(ctx, id)
	if errors.Is(err, jobstore.ErrNotFound) || errors.Is(err, jobstore.ErrInvalidWorkflowID) {
		return WorkflowView{}, fmt.Errorf("%w: %s", ErrWorkflowNotFound, id)
	}
	if err != nil {
		return WorkflowView{}, fmt.Errorf("engine: %w", err)
	}
	ids := make([]string, len(w.Nodes))
	for i, n := range w.Nodes {
		ids[i] = n.JobID
	}
	st, err := s.store.Statuses(ctx, ids)
	if err != nil {
		return WorkflowView{}, fmt.Errorf("engine: %w", err)
	}
	for i, n := range w.Nodes {
		if st[i] == "" && n.Ended != "" {
			st[i] = n.Ended
		}
	}
	return WorkflowView{WorkflowRecord: w, NodeStatus: st}, nil
}

// ParentResult is a parent node's job as its child reads it.
type ParentResult = jobstore.NodeResult

// ParentResults reads the parents of workflow node job id (their status and result), by node id;
// empty for a job that is no workflow's node or has no parents.
func (s *Stack) ParentResults(ctx context.Context, id string) (map[string]ParentResult, error) {
	k, err := s.store.Keys(id, "")
	if err != nil {
		return nil, err
	}
	field, err := s.rdb.HGet(ctx, k.Record, jobstore.FieldWorkflow).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("engine: read job %s: %w", id, err)
	}
	wfID, node, ok := jobstore.WorkflowOf(field)
	if !ok {
		return map[string]ParentResult{}, nil
	}
	w, err := s.store.LoadWorkflow(ctx, wfID)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	jobs := map[string]string{}
	var parents []string
	for _, n := range w.Nodes {
		jobs[n.ID] = n.JobID
		if n.ID == node {
			parents = n.Parents
		}
	}
	ids := make([]string, len(parents))
	for i, p := range parents {
		ids[i] = jobs[p]
	}
	res, err := s.store.NodeResults(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	out := make(map[string]ParentResult, len(parents))
	for i, p := range parents {
		out[p] = res[i]
	}
	return out, nil
}
