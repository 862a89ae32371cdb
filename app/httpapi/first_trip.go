package httpapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/engine"
)

// firstTrip is what an enqueue sends in its job's first create pipeline (engine Spec.Alongside):
// the tenant's rate limit (unless it was taken alone first: rateLimiter.speculate) and the
// Idempotency-Key claim, in one round trip with the create (one per node on a cluster). Its gate
// reads them in the order the checks had as round trips of their own, so the answers do not
// change: 429; then 409 (in flight), 422 (another request), the stored answer, 503; then the
// request's identity claim (its own round trip, identityClaim says why). The engine abandons the
// job the create made speculatively when the gate refuses; the handler then releases the claim
// this request took (release).
type firstTrip struct {
	a *api
	c *fiber.Ctx
	// rateKey is the budget to take in the pipeline; "" none (no limit, or taken already).
	rateKey string
	// idemKey is the Idempotency-Key ("" none), of tenant, for the request fingerprinted fp.
	idemKey, tenant, fp string
	identity            *identityClaim // nil: the request has no identity

	sent   bool    // the pipeline was sent: the gate ran, or runs
	claim  *claim  // the Idempotency-Key claim this request holds
	stored *answer // the key's stored answer, replayed
	kept   keptAnswer
}

// errReplay: the Idempotency-Key holds a stored answer, which is the request's (firstTrip.stored).
var errReplay = errors.New("app: the Idempotency-Key's stored answer")

// alongside is the trip as engine.Spec.Alongside, nil when there is nothing to send or check.
func (t *firstTrip) alongside() func(context.Context, redis.Pipeliner) func() error {
	if t.rateKey == "" && t.idemKey == "" && t.identity == nil {
		return nil
	}
	return t.queue
}

// queue adds the rate limit's take and the key's claim to the create's pipeline and returns the
// gate that reads them.
func (t *firstTrip) queue(ctx context.Context, pipe redis.Pipeliner) func() error {
	t.sent = true
	var take *queuedTake
	if t.rateKey != "" {
		q := t.a.limiter.queue(ctx, pipe, t.rateKey)
		take = &q
	}
	var idem *queuedClaim
	if t.idemKey != "" {
		q := t.a.idem.queueClaim(ctx, pipe, t.tenant, t.idemKey, t.fp)
		idem = &q
	}
	return func() error { return t.gate(ctx, take, idem) }
}

// gate reads the pipeline's take and claim (nil: not sent) and says whether the request goes on.
func (t *firstTrip) gate(ctx context.Context, take *queuedTake, idem *queuedClaim) error {
	var limited error
	if take != nil {
		d, err := take.decision(ctx)
		limited = t.a.limiter.judge(t.c, t.rateKey, d, err)
	}
	var stored *answer
	var claimErr error
	if idem != nil {
		// Read even when the limit refused: a claim the pipeline took is this request's to
		// release (t.claim), or it would block the key until its lease ran out.
		t.claim, stored, claimErr = idem.result(ctx)
	}
	if limited != nil {
		return limited
	}
	if idem != nil {
		if err := t.judgeClaim(stored, claimErr); err != nil {
			return err
		}
	}
	return t.identity.take(ctx)
}

// judgeClaim answers the key's claim: held (t.claim: go on), or the request's answer.
func (t *firstTrip) judgeClaim(stored *answer, err error) error {
	t.a.countIdem(err, stored)
	switch {
	case errors.Is(err, errIdemInFlight):
		return &problem.HTTPError{Status: http.StatusConflict, Code: problem.CodeIdempotencyInFlight, Field: "Idempotency-Key", Detail: err.Error()}
	case errors.Is(err, errIdemMismatch):
		return &problem.HTTPError{Status: http.StatusUnprocessableEntity, Field: "Idempotency-Key", Detail: err.Error()}
	case err != nil:
		return &problem.HTTPError{Status: http.StatusServiceUnavailable, Detail: "the Idempotency-Key could not be checked; retry later", Err: err}
	case stored != nil:
		t.stored = stored
		return errReplay
	}
	return nil
}

// finally stores the answer of a request that holds its key, in the round trip of the new job's
// confirmation or of the duplicate's timeline event (engine Spec.Finally): with the confirmation on
// one Redis node, if and only if the job was confirmed (res.Decision).
func (t *firstTrip) finally(ctx context.Context, pipe redis.Pipeliner, res engine.Enqueued) {
	if t.claim != nil {
		ans := answerFor(res)
		t.kept = keptAnswer{c: t.claim, ans: ans, cmd: t.a.idem.complete(ctx, pipe, t.claim, ans, res.Decision)}
	}
}

// unsent takes the rate limit alone for a request whose pipeline was never sent (the engine
// refused its spec first): every request spends its budget, and a spent one is 429 first.
func (t *firstTrip) unsent() error {
	if t.sent || t.rateKey == "" {
		return nil
	}
	return t.a.limiter.admit(t.c, t.rateKey)
}

// release frees the key's claim of a request that kept nothing.
func (t *firstTrip) release() {
	if t.claim != nil {
		t.a.idem.release(t.c.UserContext(), t.claim)
	}
}

// forget takes back the answer this request stored with a confirmation the replicas did not
// acknowledge (durable mode): its 503 must not be replayed as a 202.
func (t *firstTrip) forget() {
	if t.claim != nil {
		t.a.idem.forget(t.c.UserContext(), t.claim)
	}
}

// replay answers with the key's stored answer.
func (t *firstTrip) replay() error {
	c, stored := t.c, t.stored
	c.Set("Idempotent-Replayed", "true")
	if stored.location != "" {
		c.Set(fiber.HeaderLocation, stored.location)
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(stored.status).Send(stored.body)
}
