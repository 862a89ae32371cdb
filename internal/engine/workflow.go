package engine

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// HeaderWorkflow is carried by every delivery of a workflow's node: "<workflow id>:<node id>",
// so that the process that ends the node tells the workflow without reading the record.
const HeaderWorkflow = "jobguard-workflow"

// MaxWorkflowNodes bounds a workflow's size.
const MaxWorkflowNodes = 1000

// Workflow errors.
var (
	// ErrInvalidWorkflow: the workflow can never be created as it is; a *WorkflowError names the
	// node and the field.
	ErrInvalidWorkflow = errors.New("engine: invalid workflow")
	// ErrWorkflowNotFound: no workflow has that id (or it ended longer than a retention ago).
	ErrWorkflowNotFound = errors.New("engine: workflow not found")
	// ErrWorkflowEnded: the workflow had ended before the cancel.
	ErrWorkflowEnded = errors.New("engine: workflow has ended")
)

// WorkflowError is a workflow refused at creation: Node is the node's id ("" when the workflow as
// a whole is refused), Index its position, Field the node's field at fault.
type WorkflowError struct {
	Node   string
	Index  int
	Field  string
	Detail string
}

func (e *WorkflowError) Error() string {
	if e.Node == "" && e.Field == "nodes" {
		return "engine: invalid workflow: " + e.Detail
	}
	return fmt.Sprintf("engine: invalid workflow: node %q (nodes[%d]) %s: %s", e.Node, e.Index, e.Field, e.Detail)
}

// Is makes a WorkflowError an ErrInvalidWorkflow.
func (e *WorkflowError) Is(target error) bool { return target == ErrInvalidWorkflow }

// WorkflowNode is one job of a workflow and what it waits for.
type WorkflowNode struct {
	// ID names the node within its workflow: 1-64 characters of [A-Za-z0-9._-].
	ID string
	// Spec is the node's job: Type, Resource, Payload, OpKey and Headers are used; a node is
	// always a job of its own (no Dedup), delivered when released (no ProcessIn, StartBy, JobID).
	Spec Spec
	// Parents are the nodes that must end first.
	Parents []string
	// Policy: jobstore.PolicyAllDone ("" too) or jobstore.PolicyAllEnded.
	Policy string
}

// WorkflowSpec is a new workflow: its nodes form a DAG.
type WorkflowSpec struct {
	Tenant string
	// Kind is "workflow" ("" too) or "batch" (BatchSpec).
	Kind  string
	Nodes []WorkflowNode
	// Finally adds commands to send with the workflow's confirmation, after it, in the same round
	// trip (after its answer on a cluster), as Spec.Finally does for one job: e.g. storing an HTTP
	// idempotency answer, so that a confirmation whose answer was lost (ErrOutcomeUnknown) has
	// its answer stored all the same, and a retry meets it instead of creating the workflow again.
	// In the same round trip, created.Decision names the key its commands can make theirs
	// conditional on.
	Finally func(ctx context.Context, pipe redis.Pipeliner, created WorkflowCreated)
}

// WorkflowCreated is what EnqueueWorkflow made: the workflow's id and each node's job id.
type WorkflowCreated struct {
	ID   string
	Jobs map[string]string
	// Decision is set for Finally when it runs in the confirmation's round trip (one Redis node):
	// the workflow hash's key, whose status is "creating" until the confirmation takes (and which
	// is gone if it never does). A command that checks it, not the deadline, runs only if the
	// workflow was created; one that checks the deadline again can miss it by the time between
	// two adjacent commands.
	Decision string
}

var nodeIDRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// CheckWorkflow is EnqueueWorkflow's validation of w alone (a *WorkflowError, nil when valid):
// for a caller that takes claims of its own for the nodes before the enqueue (the API's orders),
// so that a workflow the enqueue would refuse takes none.
func (s *Stack) CheckWorkflow(w WorkflowSpec) error {
	_, err := s.validateWorkflow(w)
	return err
}

// validate checks the spec and returns each node's children, by index.
func (s *Stack) validateWorkflow(w WorkflowSpec) ([][]string, error) {
	if len(w.Nodes) == 0 || len(w.Nodes) > MaxWorkflowNodes {
		return nil, &WorkflowError{Field: "nodes", Detail: fmt.Sprintf("a workflow has 1 to %d nodes, not %d", MaxWorkflowNodes, len(w.Nodes))}
	}
	index := make(map[string]int, len(w.Nodes))
	for i, n := range w.Nodes {
		bad := func(field, detail string) error {
			return &WorkflowError{Node: n.ID, Index: i, Field: field, Detail: detail}
		}
		if !nodeIDRe.MatchString(n.ID) {
			return nil, bad("id", "must be 1-64 characters of [A-Za-z0-9._-]")
		}
		if _, dup := index[n.ID]; dup {
			return nil, bad("id", "is the id of another node")
		}
		index[n.ID] = i
		if _, ok := s.TaskConfig(n.Spec.Type); !ok {
			return nil, bad("type", fmt.Sprintf("%q is not a registered task type", n.Spec.Type))
		}
		if n.Policy != "" && n.Policy != jobstore.PolicyAllDone && n.Policy != jobstore.PolicyAllEnded {
			return nil, bad("policy", fmt.Sprintf("must be %s or %s, not %q", jobstore.PolicyAllDone, jobstore.PolicyAllEnded, n.Policy))
		}
		if n.Spec.Dedup != nil {
			return nil, bad("dedup", "a workflow's node is always a job of its own")
		}
		if _, err := checkSpec(n.Spec); err != nil {
			return nil, bad("payload", err.Error())
		}
	}
	children := make([][]string, len(w.Nodes))
	indegree := make([]int, len(w.Nodes))
	for i, n := range w.Nodes {
		seen := map[string]bool{}
		for _, p := range n.Parents {
			j, ok := index[p]
			switch {
			case !ok:
				return nil, &WorkflowError{Node: n.ID, Index: i, Field: "parents", Detail: fmt.Sprintf("%q is not a node of the workflow", p)}
			case seen[p]:
				return nil, &WorkflowError{Node: n.ID, Index: i, Field: "parents", Detail: fmt.Sprintf("%q is named twice", p)}
			case j == i:
				return nil, &WorkflowError{Node: n.ID, Index: i, Field: "parents", Detail: "a node cannot be its own parent"}
			}
			seen[p] = true
			children[j] = append(children[j], n.ID)
			indegree[i]++
		}
	}
	// Kahn's algorithm: what is never freed lies on a cycle or after one.
	queue := []int{}
	for i, d := range indegree {
		if d == 0 {
			queue = append(queue, i)
		}
	}
	for k := 0; k < len(queue); k++ {
		for _, c := range children[queue[k]] {
			ci := index[c]
			if indegree[ci]--; indegree[ci] == 0 {
				queue = append(queue, ci)
			}
		}
	}
	if len(queue) < len(w.Nodes) {
		for i, d := range indegree {
			if d > 0 && onCycle(w.Nodes, index, i) {
				return nil, &WorkflowError{Node: w.Nodes[i].ID, Index: i, Field: "parents", Detail: "the node's parents lead back to it (a cycle)"}
			}
		}
	}
	return children, nil
}

// onCycle reports whether node i is its own ancestor.
func onCycle(nodes []WorkflowNode, index map[string]int, i int) bool {
	seen := map[int]bool{}
	stack := []int{i}
	for len(stack) > 0 {
		k := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, p := range nodes[k].Parents {
			j := index[p]
			if j == i {
				return true
			}
			if !seen[j] {
				seen[j] = true
				stack = append(stack, j)
			}
		}
	}
	return false
}

// EnqueueWorkflow creates a workflow: every node's job record up front (a node with parents is
// held: no delivery until its parents have ended as its policy requires), the workflow's hash,
// and the deliveries of the roots. Round trips: one pipeline with the hash and every create, the
// roots' asynq enqueues (the stack's bulk client: shared pipelines), the workflow's confirmation
// (the decision), one pipeline with every node's confirmation (workflow_confirm.go). Until the
// decision everything is a claim that runs out by itself (ctx's deadline plus a second, as an
// enqueue's; the nodes' two minutes later), so a request refused leaves nothing that ever runs.
func (s *Stack) EnqueueWorkflow(ctx context.Context, w WorkflowSpec) (WorkflowCreated, error) {
	children, err := s.validateWorkflow(w)
	if err != nil {
		return WorkflowCreated{}, err
	}
	if w.Kind == "" {
		w.Kind = "workflow"
	}
	now := s.now()
	wfID := jobstore.NewWorkflowID(now)
	claim := jobstore.ClaimTTL(ctx, claimTTL)
	type node struct {
		tc   TaskConfig
		keys jobstore.Keys
		job  jobstore.NewJob
		spec Spec
		c    *jobstore.Creation
	}
	nodes := make([]node, len(w.Nodes))
	created := WorkflowCreated{ID: wfID, Jobs: make(map[string]string, len(w.Nodes))}
	hash := jobstore.NewWorkflow{ID: wfID, Tenant: w.Tenant, Kind: w.Kind, Now: now, ClaimTTL: claim}
	for i, n := range w.Nodes {
		tc, _ := s.TaskConfig(n.Spec.Type)
		spec := n.Spec
		spec.Tenant, spec.Dedup, spec.ProcessIn, spec.StartBy = w.Tenant, nil, 0, time.Time{}
		id := s.newJobIDFor(spec, now)
		keys, err := s.keysFor(id, spec.OpKey, "")
		if err != nil {
			return WorkflowCreated{}, &WorkflowError{Node: n.ID, Index: i, Field: "payload", Detail: err.Error()}
		}
		if spec.Tags, err = jobstore.NormalizeTags(spec.Tags); err != nil {
			return WorkflowCreated{}, &WorkflowError{Node: n.ID, Index: i, Field: "tags", Detail: err.Error()}
		}
		// The record keeps the payload sealed (an encrypted type); the limit key sees the plaintext.
		stored := spec
		if stored.Payload, err = s.sealValue(tc, id, jobstore.FieldPayload, spec.Payload); err != nil {
			return WorkflowCreated{}, fmt.Errorf("engine: workflow node %s: %w", n.ID, err)
		}
		j := s.newRecord(ctx, id, tc, stored, "", now)
		j.Held, j.Workflow = len(n.Parents) > 0, wfID+":"+n.ID
		// A node is confirmed after its workflow (workflow_confirm.go), by the sweep if its
		// process dies in between: its record outlives the workflow's claim by that much.
		j.ClaimTTL += workflowNodeGrace
		if !j.Held {
			waitsForKey(&j, tc, spec) // a fair type's root waits for its key's turn
		}
		nodes[i] = node{tc: tc, keys: keys, job: j, spec: spec}
		created.Jobs[n.ID] = id
		hash.Nodes = append(hash.Nodes, jobstore.WorkflowNode{ID: n.ID, JobID: id, Policy: n.Policy, Parents: n.Parents, Children: children[i]})
	}

	abandon := func() error {
		keys, ids := make([]jobstore.Keys, len(nodes)), make([]string, len(nodes))
		for i, n := range nodes {
			keys[i], ids[i] = n.keys, n.job.ID
		}
		// One pipeline, one wait for Redis: a failure (and Close, waiting on a settlement) is not
		// held a wait per node.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonWait)
		defer cancel()
		err := s.store.AbandonMany(cctx, keys, ids)
		// Left behind (Redis failed now), the entries are the sweep's: it drops them once the
		// claim is gone; a node's delivery abandons its node then (workflow_orphans.go).
		err = errors.Join(err, s.store.ForgetWorkflowEntries(cctx, wfID))
		if err != nil {
			s.log.Warn().Err(err).Str("workflow_id", wfID).Str("event", "workflow_abandon_failed").
				Msg("a workflow not created left its nodes; their deliveries abandon them once its claim is gone")
		}
		return err
	}
	_ = s.store.LoadBulkScripts(ctx) // else each create finds it missing and goes alone
	pipe := s.rdb.Pipeline()
	s.store.QueueWorkflowCreate(ctx, pipe, hash)
	entries := s.store.QueueWorkflowEntries(ctx, pipe, wfID, now)
	for i := range nodes {
		nodes[i].c = s.store.QueueCreate(ctx, pipe, nodes[i].keys, nodes[i].job)
	}
	_, _ = pipe.Exec(ctx)
	if err := entries.Err(); err != nil {
		_ = abandon()
		return WorkflowCreated{}, fmt.Errorf("engine: create workflow: %w", err)
	}
	for _, n := range nodes {
		state, _, err := n.c.Result(ctx, s.store)
		if err == nil && state != jobstore.Created {
			err = fmt.Errorf("%w: job %s was %s at its create", ErrNotAccepted, n.job.ID, state)
		}
		if err != nil {
			_ = abandon()
			return WorkflowCreated{}, fmt.Errorf("engine: create workflow: %w", err)
		}
	}

	// A fair type's roots wait for their keys' turns (in the nodes' order), and what their waits
	// admitted is delivered after the confirmation; the other roots' deliveries, many at once:
	// the bulk client sends them in shared pipelines.
	errs := make([]error, len(nodes))
	var admitted []fairAdmitted
	for i, n := range nodes {
		if n.job.Waiting {
			var entries []jobstore.FairEntry
			entries, errs[i] = s.fairWait(ctx, n.tc, n.job.ID, "", n.spec, n.job.Workflow)
			admitted = append(admitted, fairAdmitted{tc: n.tc, entries: entries})
		}
	}
	defer s.deliverFairAdmitted(ctx, admitted)
	var wg sync.WaitGroup
	sem := make(chan struct{}, bulkDeliverers)
	for i, n := range nodes {
		if n.job.Held || n.job.Waiting {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = s.deliverNode(ctx, s.bulkClient, n.tc, n.job.Queue, n.job.ID, n.job.Workflow, n.spec)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		_ = abandon()
		return WorkflowCreated{}, err
	}

	pending := make([]pendingNode, len(nodes))
	for i, n := range nodes {
		pending[i] = pendingNode{keys: n.keys, id: n.job.ID, tags: n.spec.Tags}
	}
	st, werr, err := s.confirmWorkflow(ctx, w, created)
	switch {
	case err != nil:
		// Its confirmation may have landed: nothing is abandoned now. Once its deadline has
		// passed, what it became is read: its nodes are confirmed or abandoned then.
		s.settleUnknown(ctx, created, w.Tenant, pending, abandon)
		return WorkflowCreated{}, fmt.Errorf("%w: workflow %s: %w", ErrOutcomeUnknown, wfID, err)
	case st != "confirmed":
		_ = abandon()
		return WorkflowCreated{}, fmt.Errorf("%w: workflow %s was %s at its confirmation", ErrNotAccepted, wfID, st)
	}
	s.log.Info().Str("workflow_id", wfID).Int("nodes", len(nodes)).Str("event", "workflow_created").Msg("workflow created")
	// Decided: the nodes are confirmed now, without a deadline. One this misses (Redis failed
	// just now, the process died) the workflow sweep confirms.
	nwerr, nerr := s.confirmNodes(ctx, wfID, w.Tenant, pending)
	if nerr != nil {
		s.log.Warn().Err(nerr).Str("workflow_id", wfID).Str("event", "workflow_nodes_unconfirmed").
			Msg("workflow created; its nodes are confirmed by the workflow sweep")
	}
	if werr == nil {
		werr = nwerr
	}
	if werr != nil {
		return created, &notDurable{err: fmt.Errorf("workflow %s: %w", wfID, werr)}
	}
	return created, nil
}

// deliverNode enqueues a node's first delivery to queue, its record's (its asynq task id is the job's first, so a second
// call for the same node is refused by asynq: ErrTaskIDConflict counts as delivered).
func (s *Stack) deliverNode(ctx context.Context, client *asynq.Client, tc TaskConfig, queue, id, workflow string, spec Spec) error {
	headers := map[string]string{HeaderWorkflow: workflow}
	for k, v := range limitHeaders(tc, spec) {
		headers[k] = v
	}
	err := s.deliverTo(ctx, client, tc, queue, id, DeliveryID(id, 1), spec.OpKey, "", headers, 0)
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return nil
	}
	return err
}
