package app

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/engine"
	"github.com/jobguard/jobguard/tasks"
)

// claimIdentity claims the identity of a request that has one (tasks.Identified: e.g. an order,
// its tenant and order id bound to its content for ever) before its job is enqueued. The
// same content proceeds (dedup or the applied record then answer for it); other content is a 409
// naming the identity's field. The claim names the job id this request will create, so settle,
// called when the handler returns, removes it again only if this request created it and the
// enqueue kept nothing.
func (a *api) claimIdentity(ctx context.Context, req tasks.Request, spec *engine.Spec) (settle func(), err error) {
	idr, ok := req.(tasks.Identified)
	if !ok {
		return func() {}, nil
	}
	id := idr.Identity()
	if spec.JobID == "" {
		resource := spec.Resource
		if resource == "" {
			resource = "job:" + strconv.FormatInt(time.Now().UnixNano(), 36) + a.stack.Locks().NewOwner()
		}
		spec.JobID = engine.NewJobID(resource, time.Now())
	}
	locks := a.stack.Locks()
	c, err := tasks.ClaimIdentity(ctx, locks, id, spec.JobID)
	if err != nil {
		return nil, &HTTPError{Status: http.StatusServiceUnavailable, Detail: "the request could not be checked against earlier ones; nothing was kept, retry later", Err: err}
	}
	if c.State == tasks.ClaimConflict {
		return nil, &HTTPError{Status: http.StatusConflict, Code: CodeOrderConflict, Field: id.Field,
			Detail: fmt.Sprintf("%s was already submitted with different content; send it unchanged, or use a new %s", id.What, id.Field)}
	}
	if !c.Ours(spec.JobID) {
		return func() {}, nil
	}
	// Finally runs only when the enqueue kept something (a new job or a duplicate's answer).
	kept := false
	then := spec.Finally
	spec.Finally = func(ctx context.Context, pipe redis.Pipeliner, res engine.Enqueued) {
		kept = true
		if then != nil {
			then(ctx, pipe, res)
		}
	}
	jobID := spec.JobID
	return func() {
		if kept {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_, _ = tasks.ReleaseIdentity(rctx, locks, c, jobID) // best effort: a claim left is still this content's
	}, nil
}
