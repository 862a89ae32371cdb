package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/engine"
)

// batchRequest is the body of POST /batches: jobs of registered task types (each payload the body
// of its POST /jobs/<type> route), and the callbacks, each a job of a task type enqueued once:
// on_success when every job is done, on_complete when every job has ended.
type batchRequest struct {
	TenantID   string            `json:"tenant_id"`
	Jobs       []batchJobRequest `json:"jobs" openapi:"minItems=1,maxItems=1000"`
	OnSuccess  *batchJobRequest  `json:"on_success" openapi:"optional"`
	OnComplete *batchJobRequest  `json:"on_complete" openapi:"optional"`
}

type batchJobRequest struct {
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload" openapi:"type=object"`
}

// batchCreated is the body of POST /batches' 202.
type batchCreated struct {
	BatchID    string   `json:"batch_id" openapi:"ref=WorkflowID"`
	Jobs       []string `json:"jobs" openapi:"items=JobID"`
	OnSuccess  string   `json:"on_success,omitempty" openapi:"ref=JobID"`
	OnComplete string   `json:"on_complete,omitempty" openapi:"ref=JobID"`
}

// batchView is GET /batches/{id}.
type batchView struct {
	BatchID    string             `json:"batch_id" openapi:"ref=WorkflowID"`
	Status     string             `json:"status" openapi:"ref=WorkflowStatus"`
	Total      int                `json:"total" openapi:"min=0"`
	Done       int                `json:"done" openapi:"min=0"`
	Failed     int                `json:"failed" openapi:"min=0"`
	Pending    int                `json:"pending" openapi:"min=0"`
	Jobs       []string           `json:"jobs" openapi:"items=JobID"`
	OnSuccess  *batchCallbackView `json:"on_success,omitempty"`
	OnComplete *batchCallbackView `json:"on_complete,omitempty"`
}

type batchCallbackView struct {
	JobID  string `json:"job_id" openapi:"ref=JobID"`
	Status string `json:"status" openapi:"ref=JobStatus,orEmpty"`
}

// createBatch is POST /batches.
func (a *api) createBatch(c *fiber.Ctx) error {
	if err := requireJSON(c); err != nil {
		return err
	}
	var req batchRequest
	if err := decodeJSON(c.Body(), &req); err != nil {
		return err
	}
	if err := a.checkTenant(c, req.TenantID); err != nil {
		return err
	}
	callbacks := 0
	for _, cb := range []*batchJobRequest{req.OnSuccess, req.OnComplete} {
		if cb != nil {
			callbacks++
		}
	}
	if len(req.Jobs) == 0 || len(req.Jobs)+callbacks > engine.MaxWorkflowNodes {
		return problem.BadField("jobs", fmt.Sprintf("a batch has 1 to %d jobs, callbacks included, not %d", engine.MaxWorkflowNodes, len(req.Jobs)+callbacks))
	}
	b := engine.BatchSpec{Tenant: req.TenantID, Jobs: make([]engine.Spec, len(req.Jobs))}
	var claims nodeClaims
	for i, j := range req.Jobs {
		spec, err := a.nodeSpec(c, req.TenantID, fmt.Sprintf("jobs[%d]", i), fmt.Sprintf("job-%d", i), j.Type, j.Payload, &claims)
		if err != nil {
			return err
		}
		b.Jobs[i] = spec
	}
	for _, cb := range []struct {
		field string
		req   *batchJobRequest
		spec  **engine.Spec
	}{{engine.BatchOnSuccess, req.OnSuccess, &b.OnSuccess}, {engine.BatchOnComplete, req.OnComplete, &b.OnComplete}} {
		if cb.req == nil {
			continue
		}
		spec, err := a.nodeSpec(c, req.TenantID, cb.field, cb.field, cb.req.Type, cb.req.Payload, &claims)
		if err != nil {
			return err
		}
		*cb.spec = &spec
	}
	if err := a.stack.CheckBatch(b); err != nil {
		return workflowError(err, "jobs") // before any job claims its order
	}
	return a.once(c, req.TenantID, func(keep answerKeeper) (answer, error) {
		if keep != nil {
			b.Finally = func(ctx context.Context, pipe redis.Pipeliner, created engine.WorkflowCreated) {
				keep(ctx, pipe, batchAnswer(created, len(b.Jobs)), created.Decision)
			}
		}
		created, err := a.enqueueClaimed(c.UserContext(), &claims, func(ctx context.Context) (engine.WorkflowCreated, error) {
			return a.stack.EnqueueBatch(ctx, b)
		})
		if created.ID == "" {
			return answer{}, workflowError(err, "jobs")
		}
		if err != nil {
			return batchAnswer(created, len(b.Jobs)), notDurableError(err)
		}
		return batchAnswer(created, len(b.Jobs)), nil
	})
}

// batchAnswer is the answer to a batch of jobs jobs created.
func batchAnswer(created engine.WorkflowCreated, jobs int) answer {
	out := batchCreated{BatchID: created.ID, Jobs: make([]string, jobs),
		OnSuccess: created.Jobs[engine.BatchOnSuccess], OnComplete: created.Jobs[engine.BatchOnComplete]}
	for i := range out.Jobs {
		out.Jobs[i] = created.Jobs[fmt.Sprintf("job-%d", i)]
	}
	body, _ := json.Marshal(out)
	return answer{status: http.StatusAccepted, body: body, location: "/batches/" + created.ID}
}

// getBatch is GET /batches/{id}: the batch's progress.
func (a *api) getBatch(c *fiber.Ctx) error {
	v, err := a.loadWorkflow(c, "batch")
	if err != nil {
		return err
	}
	if v.Kind != "batch" {
		return &problem.HTTPError{Status: http.StatusNotFound, Detail: "no batch " + v.ID}
	}
	bv, err := a.stack.Batch(c.UserContext(), v.ID)
	if err != nil {
		return err
	}
	out := batchView{BatchID: bv.ID, Status: bv.Status, Total: bv.Total, Done: bv.Done, Failed: bv.Failed, Pending: bv.Pending, Jobs: bv.Jobs}
	if cb := bv.OnSuccess; cb != nil {
		out.OnSuccess = &batchCallbackView{JobID: cb.JobID, Status: string(cb.Status)}
	}
	if cb := bv.OnComplete; cb != nil {
		out.OnComplete = &batchCallbackView{JobID: cb.JobID, Status: string(cb.Status)}
	}
	return c.JSON(out)
}
