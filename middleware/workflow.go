package middleware

import (
	"context"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/engine"
)

// Policies of a workflow's node: when it is released once its parents have ended.
const (
	// AllDone (the default): every parent ended done; a parent that failed, was cancelled or
	// skipped makes the node end skipped, and its own children after it.
	AllDone = "all_done"
	// AllEnded: every parent ended, however (a clean-up, a report).
	AllEnded = "all_ended"
)

// Workflow errors.
var (
	// ErrInvalidWorkflow: the workflow can never be created as it is; errors.As finds a
	// *WorkflowError naming the node and the field.
	ErrInvalidWorkflow = engine.ErrInvalidWorkflow
	// ErrWorkflowNotFound: no workflow (or batch) has that id, or it ended longer than a
	// retention ago.
	ErrWorkflowNotFound = engine.ErrWorkflowNotFound
	// ErrWorkflowEnded: the workflow had ended before the cancel.
	ErrWorkflowEnded = engine.ErrWorkflowEnded
)

// WorkflowError names the node (its id and position) and the field a workflow was refused for.
type WorkflowError = engine.WorkflowError

// MaxWorkflowNodes bounds a workflow's (or a batch's, callbacks included) size.
const MaxWorkflowNodes = engine.MaxWorkflowNodes

// WorkflowNode is one task of a workflow and what it waits for. Its type must be protected at job
// level; a node is always a job of its own (no dedup), delivered when it is released.
type WorkflowNode struct {
	// ID names the node within the workflow: 1-64 characters of [A-Za-z0-9._-].
	ID   string
	Task *asynq.Task
	// Resource and OpKey are as EnqueueOptions' (empty: the job is its own resource, no op key).
	Resource, OpKey string
	// Parents are the nodes that must end first.
	Parents []string
	// Policy is AllDone ("" too) or AllEnded.
	Policy string
}

// Workflow is a set of tasks with dependencies (a DAG) of one tenant.
type Workflow struct {
	Tenant string
	Nodes  []WorkflowNode
}

// WorkflowEnqueued is what EnqueueWorkflow or EnqueueBatch made: the id and each node's job id.
type WorkflowEnqueued struct {
	ID   string
	Jobs map[string]string
}

// EnqueueWorkflow creates a workflow: every node's job at once, the roots delivered, the others
// held until their parents have ended as their policy requires. When it returns nil every node
// will run or end (skipped, cancelled) without the caller; the guard's Run repairs what a process
// that died between a parent's end and its children's release left undone.
func (g *Guard) EnqueueWorkflow(ctx context.Context, w Workflow) (WorkflowEnqueued, error) {
	spec := engine.WorkflowSpec{Tenant: w.Tenant, Nodes: make([]engine.WorkflowNode, len(w.Nodes))}
	for i, n := range w.Nodes {
		spec.Nodes[i] = engine.WorkflowNode{ID: n.ID, Spec: nodeSpec(n.Task, n.Resource, n.OpKey), Parents: n.Parents, Policy: n.Policy}
	}
	c, err := g.stack.EnqueueWorkflow(ctx, spec)
	return WorkflowEnqueued{ID: c.ID, Jobs: c.Jobs}, err
}

func nodeSpec(t *asynq.Task, resource, opKey string) engine.Spec {
	if t == nil {
		return engine.Spec{Resource: resource, OpKey: opKey}
	}
	return engine.Spec{Type: t.Type(), Payload: t.Payload(), Headers: t.Headers(), Resource: resource, OpKey: opKey}
}

// WorkflowStatus is a workflow as its records say.
type WorkflowStatus struct {
	ID, Tenant string
	// Status is running, done (every node done), failed (a node did not end done) or cancelled.
	Status string
	Nodes  []WorkflowNodeStatus
}

// WorkflowNodeStatus is one node: its job's id and status (held while it waits for its parents;
// skipped when a parent it needed did not end done).
type WorkflowNodeStatus struct {
	ID, JobID, Status, Policy string
	Parents                   []string
}

// Workflow reads workflow id (ErrWorkflowNotFound when there is none).
func (g *Guard) Workflow(ctx context.Context, id string) (WorkflowStatus, error) {
	v, err := g.stack.Workflow(ctx, id)
	if err != nil {
		return WorkflowStatus{}, err
	}
	out := WorkflowStatus{ID: v.ID, Tenant: v.Tenant, Status: v.Status, Nodes: make([]WorkflowNodeStatus, len(v.Nodes))}
	for i, n := range v.Nodes {
		out.Nodes[i] = WorkflowNodeStatus{ID: n.ID, JobID: n.JobID, Status: string(v.NodeStatus[i]), Policy: n.Policy, Parents: n.Parents}
	}
	return out, nil
}

// CancelWorkflow cancels workflow id: no node is released from then on, and every node that has
// not ended is cancelled (a running one as Cancel does). ErrWorkflowEnded when it had ended.
func (g *Guard) CancelWorkflow(ctx context.Context, id string) error {
	return g.stack.CancelWorkflow(ctx, id)
}

// BatchJob is one task of a batch, or a callback.
type BatchJob struct {
	Task            *asynq.Task
	Resource, OpKey string
}

// Batch is a group of tasks of one tenant with callbacks: OnSuccess runs once when every task is
// done (it ends skipped otherwise), OnComplete once when every task has ended, however. Each
// callback is a job whose handler may read the tasks' results (Run.ParentResults: the tasks are
// nodes job-0, job-1, ... in order).
type Batch struct {
	Tenant                string
	Jobs                  []BatchJob
	OnSuccess, OnComplete *BatchJob
}

// EnqueueBatch creates a batch (a workflow of kind batch: its id is read with Batch).
func (g *Guard) EnqueueBatch(ctx context.Context, b Batch) (WorkflowEnqueued, error) {
	spec := engine.BatchSpec{Tenant: b.Tenant, Jobs: make([]engine.Spec, len(b.Jobs))}
	for i, j := range b.Jobs {
		spec.Jobs[i] = nodeSpec(j.Task, j.Resource, j.OpKey)
	}
	if j := b.OnSuccess; j != nil {
		s := nodeSpec(j.Task, j.Resource, j.OpKey)
		spec.OnSuccess = &s
	}
	if j := b.OnComplete; j != nil {
		s := nodeSpec(j.Task, j.Resource, j.OpKey)
		spec.OnComplete = &s
	}
	c, err := g.stack.EnqueueBatch(ctx, spec)
	return WorkflowEnqueued{ID: c.ID, Jobs: c.Jobs}, err
}

// BatchStatus is a batch's progress.
type BatchStatus struct {
	ID, Tenant, Status string
	// Total tasks (callbacks apart): Done of them done, Failed ended otherwise, Pending not ended.
	Total, Done, Failed, Pending int
	Jobs                         []string
	// OnSuccess and OnComplete are the callbacks' jobs (nil: none).
	OnSuccess, OnComplete *BatchCallback
}

// BatchCallback is a batch's callback job.
type BatchCallback struct{ JobID, Status string }

// Batch reads batch id's progress (ErrWorkflowNotFound when there is none).
func (g *Guard) Batch(ctx context.Context, id string) (BatchStatus, error) {
	v, err := g.stack.Batch(ctx, id)
	if err != nil {
		return BatchStatus{}, err
	}
	out := BatchStatus{ID: v.ID, Tenant: v.Tenant, Status: v.Status, Total: v.Total, Done: v.Done, Failed: v.Failed, Pending: v.Pending, Jobs: v.Jobs}
	if c := v.OnSuccess; c != nil {
		out.OnSuccess = &BatchCallback{JobID: c.JobID, Status: string(c.Status)}
	}
	if c := v.OnComplete; c != nil {
		out.OnComplete = &BatchCallback{JobID: c.JobID, Status: string(c.Status)}
	}
	return out, nil
}

// ParentResult is a parent node's job as its child reads it: id, status and result (Run.SetResult).
type ParentResult struct{ JobID, Status, Result string }

// ParentResults reads the run's workflow parents, by node id (empty when the job is no
// workflow's node, or a root). Job level only (ErrNotAJob).
func (r *Run) ParentResults(ctx context.Context) (map[string]ParentResult, error) {
	if r.job == nil {
		return nil, ErrNotAJob
	}
	res, err := r.job.ParentResults(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]ParentResult, len(res))
	for n, p := range res {
		out[n] = ParentResult{JobID: p.JobID, Status: string(p.Status), Result: p.Result}
	}
	return out, nil
}
