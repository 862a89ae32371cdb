package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/tasks"
)

// bulkRequest is the body of POST /jobs/{type}/bulk: up to 1,000 bodies of the type's enqueue
// route. atomic (or ?atomic=true): when any item is refused none is created.
type bulkRequest struct {
	Atomic bool              `json:"atomic" openapi:"optional"`
	Items  []json.RawMessage `json:"items" openapi:"items=BulkItem,minItems=1,maxItems=1000"`
}

// bulkAnswer is its 200: one answer per item, in order, as the single route would give it.
type bulkAnswer struct {
	Atomic       bool         `json:"atomic"`
	Created      int          `json:"created" openapi:"min=0"`
	Deduplicated int          `json:"deduplicated" openapi:"min=0"`
	Refused      int          `json:"refused" openapi:"min=0"`
	Items        []bulkResult `json:"items"`
}

// bulkResult is one item's answer: status 202 (new job) or 200 (deduplicated) with the job's id,
// or the status and problem the single route would have answered.
type bulkResult struct {
	Status       int              `json:"status"`
	JobID        string           `json:"job_id,omitempty" openapi:"ref=JobID"`
	Deduplicated bool             `json:"deduplicated,omitempty"`
	Problem      *problem.Details `json:"problem,omitempty"`
}

// bulk serves POST /jobs/<type>/bulk. Each item is validated as the single route validates its
// body (start_by and tags, the tenant rule, an order's identity claimed); the valid ones are enqueued
// together (engine.Stack.EnqueueMany: one pipeline of creates, the asynq enqueues a few at once,
// one pipeline of confirmations). The request takes one unit of the tenant's rate limit. With an
// Idempotency-Key the answer is stored and replayed as the single route's is (once): the same
// key and body (and atomic mode) get it again; it is not stored when nothing was kept and an
// item failed for a reason that may pass (a 5xx) and none may have been queued (outcome unknown,
// not durable), so that a retry with the key runs again. An item refused with a 5xx puts
// Retry-After on the answer.
func (a *api) bulk(t tasks.Task) fiber.Handler {
	return func(c *fiber.Ctx) error {
		if err := requireJSON(c); err != nil {
			return err
		}
		var req bulkRequest
		if err := decodeJSON(c.Body(), &req); err != nil {
			return err
		}
		queryAtomic, err := atomicQuery(c.Context().QueryArgs().Has("atomic"), c.Query("atomic"))
		if err != nil {
			return err
		}
		req.Atomic = req.Atomic || queryAtomic
		if len(req.Items) == 0 || len(req.Items) > engine.MaxBulk {
			return problem.BadField("items", fmt.Sprintf("a bulk has 1 to %d items, not %d", engine.MaxBulk, len(req.Items)))
		}
		// The query's atomic is part of what the request asks: the same key and body with another
		// mode is another request (422), not a replay.
		fp := fingerprint(c.Method(), c.Path()+"?atomic="+strconv.FormatBool(req.Atomic), c.Body())
		return a.onceFor(c, tenantOf(c), fp, func(answerKeeper) (answer, error) {
			ans := a.bulkItems(c, t, req)
			body, err := json.Marshal(ans)
			if err != nil {
				return answer{}, err
			}
			out := answer{status: http.StatusOK, body: body}
			if !ans.transient() {
				return out, nil
			}
			// An item refused for a reason that may pass (Redis stalled or down, a duplicate not
			// confirmed yet): the answer says when to send those items again.
			out.retryAfter = problem.UnavailableRetryAfter
			if ans.Created == 0 && ans.Deduplicated == 0 && !ans.mayHaveKept() {
				return out, errAnswerNotKept
			}
			return out, nil
		})
	}
}

// bulkItems validates and enqueues the items of req: the answer for each.
func (a *api) bulkItems(c *fiber.Ctx, t tasks.Task, req bulkRequest) bulkAnswer {
	ctx := c.UserContext()
	errs := make([]error, len(req.Items))
	specs := make([]engine.Spec, 0, len(req.Items))
	index := make([]int, 0, len(req.Items)) // specs[k] is item index[k]
	claims := make([]*identityClaim, len(req.Items))
	now := time.Now()
	for i, raw := range req.Items {
		body, jf, err := takeJobFields(raw, now)
		var r tasks.Request
		if err == nil {
			r, err = acceptBody(c, body, t.Request())
		}
		if err != nil {
			errs[i] = err
			continue
		}
		spec := r.Spec()
		spec.Headers = traceHeaders(c)
		if !jf.StartBy.IsZero() {
			spec.StartBy = jf.StartBy
		}
		spec.Tags = append(spec.Tags, jf.Tags...) // the task's own, if any, and the body's
		claims[i] = a.prepareIdentity(r, &spec)
		specs, index = append(specs, spec), append(index, i)
	}
	for i := range claims {
		defer claims[i].settle(ctx)
	}
	// Every item's identity in one round trip; an item refused there leaves the enqueue.
	claimed := takeClaims(ctx, claims)
	kept := 0
	for k, i := range index {
		if errs[i] = claimed[i]; errs[i] == nil {
			specs[kept], index[kept] = specs[k], i
			kept++
		}
	}
	specs, index = specs[:kept], index[:kept]
	results := make([]engine.BulkItem, len(req.Items))
	refused := false
	for _, err := range errs {
		refused = refused || err != nil
	}
	if req.Atomic && refused {
		for i := range results {
			if errs[i] == nil {
				results[i].Err = engine.ErrBulkAborted
			}
		}
	} else {
		for k, r := range a.stack.EnqueueMany(ctx, specs, req.Atomic) {
			results[index[k]] = r
		}
	}
	ans := bulkAnswer{Atomic: req.Atomic, Items: make([]bulkResult, len(req.Items))}
	for i, r := range results {
		err := errs[i]
		if err == nil {
			err = r.Err
		}
		claims[i].enqueued(err)
		switch {
		case err != nil:
			p := itemProblem(err)
			ans.Items[i] = bulkResult{Status: p.Status, Problem: &p}
			ans.Refused++
		case r.Deduplicated:
			ans.Items[i] = bulkResult{Status: http.StatusOK, JobID: r.JobID, Deduplicated: true}
			ans.Deduplicated++
		default:
			ans.Items[i] = bulkResult{Status: http.StatusAccepted, JobID: r.JobID}
			ans.Created++
		}
	}
	return ans
}

// transient reports whether an item was refused for a reason that may pass (a 5xx problem).
func (b bulkAnswer) transient() bool {
	for _, it := range b.Items {
		if it.Status >= 500 {
			return true
		}
	}
	return false
}

// mayHaveKept reports whether an item's job may stand although it was refused: its outcome is
// unknown, or it was queued without its replicas' acknowledgement. Such an answer is stored for
// the Idempotency-Key, so that a retry learns it rather than creating the job a second time.
func (b bulkAnswer) mayHaveKept() bool {
	for _, it := range b.Items {
		if it.Problem != nil && (it.Problem.Code == problem.CodeOutcomeUnknown || it.Problem.Code == problem.CodeNotDurable) {
			return true
		}
	}
	return false
}

// itemProblem is the problem the single enqueue route answers err with.
func itemProblem(err error) problem.Details {
	var p problem.Details
	var he *problem.HTTPError
	var fe *tasks.FieldError
	switch {
	case errors.As(err, &he):
		p = problem.Details{Status: he.Status, Detail: he.Detail, Field: he.Field, Code: he.Code}
	case errors.As(err, &fe):
		p = problem.Details{Status: http.StatusBadRequest, Detail: fe.Field + " " + fe.Detail, Field: fe.Field}
	case errors.Is(err, engine.ErrBulkAborted):
		p = problem.Details{Status: http.StatusFailedDependency, Code: problem.CodeBulkAborted, Detail: "not created: another item of this atomic bulk was refused"}
	case errors.Is(err, engine.ErrStartBy):
		p = problem.Details{Status: http.StatusBadRequest, Field: "start_by", Detail: "start_by is before the job's first delivery may start"}
	case errors.Is(err, engine.ErrDedupPending):
		p = problem.Details{Status: http.StatusServiceUnavailable, Code: problem.CodeDedupPending, Detail: "a duplicate of a job whose enqueue is not confirmed yet; nothing was kept, retry shortly"}
	case errors.Is(err, engine.ErrNotDurable):
		p = problem.Details{Status: http.StatusServiceUnavailable, Code: problem.CodeNotDurable, Detail: "the job was queued but its replicas did not acknowledge it in time"}
	case errors.Is(err, engine.ErrOutcomeUnknown):
		p = problem.Details{Status: http.StatusServiceUnavailable, Code: problem.CodeOutcomeUnknown, Detail: "Redis did not answer in time: the job may have been queued"}
	default:
		p = problem.Details{Status: http.StatusServiceUnavailable, Code: problem.CodeEnqueueFailed, Detail: "the job could not be queued; nothing was kept, retry later"}
	}
	if p.Code == "" {
		p.Code = problem.CodeForStatus[p.Status]
	}
	if p.Code == "" {
		p.Code = problem.CodeHTTPError
	}
	p.Type, p.Title = problem.TypeBase+p.Code, http.StatusText(p.Status)
	return p
}

// atomicQuery reads the query's atomic (present: given, even empty): absent, true or false;
// anything else is a 400 rather than a bulk run non-atomically that its caller asked to be atomic.
func atomicQuery(present bool, v string) (bool, error) {
	switch {
	case !present, v == "false":
		return false, nil
	case v == "true":
		return true, nil
	}
	return false, problem.BadField("atomic", `atomic is "true" or "false"`)
}
