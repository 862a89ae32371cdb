package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/locking"
	"github.com/jobguard/jobguard/tasks"
)

// identityClaim is the claim of a request's identity (tasks.Identified: e.g. an order, its tenant
// and order id bound to its content for ever), made before its job may be enqueued. The same
// content proceeds (dedup or the applied record then answer for it); other content is a 409
// naming the identity's field. The claim names the job id this request will create, so settle
// removes it again only if this request created it and the enqueue kept nothing.
//
// It is not sent speculatively with the create (firstTrip): a claim this request made and then
// released because its gate refused it (429, 409 in flight) may already be the one a concurrent
// request with the same content relies on; released, another content could claim the order. So
// it is a round trip of its own, after the gate's other checks passed.
type identityClaim struct {
	locks *locking.Client
	id    tasks.Identity
	jobID string
	claim tasks.Claim
	ours  bool
	kept  bool
	// deadline is the request's in Redis's clock (engine.Stack.WriteDeadline).
	deadline func(context.Context) int64
}

// prepareIdentity fixes the id of the job a request with an identity will create; nil when the
// request has none. The handler tells it the enqueue's outcome (enqueued).
func (a *api) prepareIdentity(req tasks.Request, spec *engine.Spec) *identityClaim {
	idr, ok := req.(tasks.Identified)
	if !ok {
		return nil
	}
	if spec.JobID == "" {
		resource := spec.Resource
		if resource == "" {
			resource = "job:" + strconv.FormatInt(time.Now().UnixNano(), 36) + a.stack.Locks().NewOwner()
		}
		spec.JobID = engine.NewJobID(resource, time.Now())
	}
	return &identityClaim{locks: a.stack.Locks(), id: idr.Identity(), jobID: spec.JobID, deadline: a.stack.WriteDeadline}
}

// enqueued tells the claim how the request's enqueue ended: something may be kept when it
// succeeded, or when its outcome is unknown (the job may stand); after any other error nothing
// was, whatever commands had been queued (a confirmation that came back expired leaves none).
func (ic *identityClaim) enqueued(err error) {
	if ic != nil {
		ic.kept = err == nil || errors.Is(err, engine.ErrOutcomeUnknown)
	}
}

// take claims the identity, in one round trip; nil when the request may proceed. A nil claim
// (no identity) takes nothing.
func (ic *identityClaim) take(ctx context.Context) error {
	if ic == nil {
		return nil
	}
	c, err := tasks.ClaimIdentity(ctx, ic.locks, ic.id, ic.jobID, ic.deadline(ctx))
	return ic.took(c, err)
}

// takeClaims takes every claim of claims (a nil one takes nothing) in one round trip, in order;
// each gets take's answer, at the same index: a bulk's or a workflow's 1,000 orders cost one
// round trip, not 1,000.
func takeClaims(ctx context.Context, claims []*identityClaim) []error {
	errs := make([]error, len(claims))
	var reqs []tasks.ClaimRequest
	var at []int
	for i, ic := range claims {
		if ic != nil {
			reqs, at = append(reqs, tasks.ClaimRequest{ID: ic.id, JobID: ic.jobID}), append(at, i)
		}
	}
	if len(reqs) == 0 {
		return errs
	}
	first := claims[at[0]]
	got, failed := tasks.ClaimIdentities(ctx, first.locks, reqs, first.deadline(ctx))
	for k, i := range at {
		errs[i] = claims[i].took(got[k], failed[k])
	}
	return errs
}

// took records what taking the claim found: nil when the request may proceed.
func (ic *identityClaim) took(c tasks.Claim, err error) error {
	if err != nil {
		return &problem.HTTPError{Status: http.StatusServiceUnavailable, Detail: "the request could not be checked against earlier ones; nothing was kept, retry later", Err: err}
	}
	if c.State == tasks.ClaimConflict {
		return &problem.HTTPError{Status: http.StatusConflict, Code: problem.CodeOrderConflict, Field: ic.id.Field,
			Detail: fmt.Sprintf("%s was already submitted with different content; send it unchanged, or use a new %s", ic.id.What, ic.id.Field)}
	}
	ic.claim, ic.ours = c, c.Ours(ic.jobID)
	return nil
}

// settle, called when the handler returns, removes a claim this request created when its
// enqueue kept nothing.
func (ic *identityClaim) settle(ctx context.Context) {
	if ic == nil || !ic.ours || ic.kept {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_, _ = tasks.ReleaseIdentity(rctx, ic.locks, ic.claim, ic.jobID) // best effort: a claim left is still this content's
}
