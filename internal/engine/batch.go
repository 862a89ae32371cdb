package engine

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// A batch is a workflow of kind "batch": its jobs are roots (nodes job-0, job-1, ...), and each
// callback is a node whose parents are every job: on_success with policy all_done (it runs when
// every job is done; otherwise it ends skipped), on_complete with all_ended (it runs when every
// job has ended, however). A callback is released once, by the script that notes the last job's
// end, and delivered under its job's first task id, whatever dies when.

// Node ids of a batch's callbacks.
const (
	BatchOnSuccess  = "on_success"
	BatchOnComplete = "on_complete"
)

// BatchSpec is a new batch.
type BatchSpec struct {
	Tenant string
	Jobs   []Spec
	// OnSuccess and OnComplete are the callbacks' jobs (nil: none).
	OnSuccess, OnComplete *Spec
	// Finally: as WorkflowSpec.Finally.
	Finally func(ctx context.Context, pipe redis.Pipeliner, created WorkflowCreated)
}

// batchJobNode is the node id of a batch's i-th job.
func batchJobNode(i int) string { return "job-" + strconv.Itoa(i) }

// workflow is the batch as a workflow.
func (b BatchSpec) workflow() (WorkflowSpec, error) {
	callbacks := 0
	if b.OnSuccess != nil {
		callbacks++
	}
	if b.OnComplete != nil {
		callbacks++
	}
	if len(b.Jobs) == 0 || len(b.Jobs)+callbacks > MaxWorkflowNodes {
		return WorkflowSpec{}, &WorkflowError{Field: "nodes", Detail: fmt.Sprintf("a batch has 1 to %d jobs, callbacks included, not %d", MaxWorkflowNodes, len(b.Jobs)+callbacks)}
	}
	w := WorkflowSpec{Tenant: b.Tenant, Kind: "batch", Finally: b.Finally}
	parents := make([]string, len(b.Jobs))
	for i, j := range b.Jobs {
		parents[i] = batchJobNode(i)
		w.Nodes = append(w.Nodes, WorkflowNode{ID: parents[i], Spec: j})
	}
	if b.OnSuccess != nil {
		w.Nodes = append(w.Nodes, WorkflowNode{ID: BatchOnSuccess, Spec: *b.OnSuccess, Parents: parents, Policy: jobstore.PolicyAllDone})
	}
	if b.OnComplete != nil {
		w.Nodes = append(w.Nodes, WorkflowNode{ID: BatchOnComplete, Spec: *b.OnComplete, Parents: parents, Policy: jobstore.PolicyAllEnded})
	}
	return w, nil
}

// CheckBatch is EnqueueBatch's validation of b alone (see CheckWorkflow).
func (s *Stack) CheckBatch(b BatchSpec) error {
	w, err := b.workflow()
	if err != nil {
		return err
	}
	return s.CheckWorkflow(w)
}

// EnqueueBatch creates a batch (a workflow, see BatchSpec); its id is the workflow's.
func (s *Stack) EnqueueBatch(ctx context.Context, b BatchSpec) (WorkflowCreated, error) {
	w, err := b.workflow()
	if err != nil {
		return WorkflowCreated{}, err
	}
	return s.EnqueueWorkflow(ctx, w)
}

// BatchView is a batch's progress.
type BatchView struct {
	ID, Tenant, Status string
	// Total jobs (callbacks apart); Done of them done, Failed ended otherwise, Pending not ended.
	Total, Done, Failed, Pending int
	// Jobs are the jobs' ids in the creation's order.
	Jobs []string
	// OnSuccess and OnComplete are the callbacks (nil: none).
	OnSuccess, OnComplete *BatchCallback
}

// BatchCallback is a batch's callback job.
type BatchCallback struct {
	JobID  string
	Status jobstore.Status
}

// Batch reads batch id's progress; ErrWorkflowNotFound when there is none (or it is a workflow).
func (s *Stack) Batch(ctx context.Context, id string) (BatchView, error) {
	v, err := s.Workflow(ctx, id)
	if err != nil {
		return BatchView{}, err
	}
	if v.Kind != "batch" {
		return BatchView{}, fmt.Errorf("%w: %s", ErrWorkflowNotFound, id)
	}
	b := BatchView{ID: v.ID, Tenant: v.Tenant, Status: v.Status}
	for i, n := range v.Nodes {
		st := v.NodeStatus[i]
		switch n.ID {
		case BatchOnSuccess:
			b.OnSuccess = &BatchCallback{JobID: n.JobID, Status: st}
			continue
		case BatchOnComplete:
			b.OnComplete = &BatchCallback{JobID: n.JobID, Status: st}
			continue
		}
		b.Total++
		b.Jobs = append(b.Jobs, n.JobID)
		switch {
		case st == jobstore.StatusDone:
			b.Done++
		case st.Terminal() || st == "":
			b.Failed++
		default:
			b.Pending++
		}
	}
	return b, nil
}
