package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/app/auth"
	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/history"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/tasks"
)

// api serves the job endpoints: enqueue (one route per registered task type), job view, replay,
// and the read-model routes the task types bring.
type api struct {
	stack  *engine.Stack
	client *asynq.Client
	idem   idempotency
	tokens auth.Tokens // bearer token -> tenant; empty: open
	// operators are OPERATOR_TOKENS: the routes that show a whole type (GET /fairness/{type})
	// take them too, with no tenant.
	operators auth.Tokens
	tasks     []tasks.Task // one POST /jobs/<type> route each, and their read-model routes
	metrics   *httpMetrics
	limiter   *rateLimiter  // nil: no rate limit
	sql       *pgxpool.Pool // read models' PostgreSQL; nil without DATABASE_URL

	streams context.Context // ends the event streams when the app stops (events.go)
	feeds   *feeds          // the event streams' shared pollers and caps (event_feeds.go)
}

const localTenant = "tenant"

func (a *api) routes(f *fiber.App) {
	guard, limit := a.authenticate, a.limiter.handler()
	for _, t := range a.tasks {
		f.Post("/jobs/"+t.Type, guard, a.enqueue(t)) // the handler takes the rate limit
		f.Post("/jobs/"+t.Type+"/bulk", guard, limit, a.bulk(t))
	}
	f.Get("/jobs", guard, limit, a.list)
	f.Get("/jobs/:id", guard, limit, a.viewOrWait)
	f.Get("/jobs/:id/events", guard, limit, a.events)
	f.Post("/jobs/:id/retry", guard, limit, a.retry)
	f.Post("/jobs/:id/cancel", guard, limit, a.cancel)
	f.Post("/jobs/:id/skip", guard, limit, a.skipBlocked)
	f.Get("/fairness/:type", a.authenticateOrOperator, limit, a.fairness)
	a.workflowRoutes(f)
	for _, t := range a.tasks {
		for _, r := range t.Routes {
			f.Get(r.Path, guard, pathTenant(r), limit, a.readModel(r)) // GET only: tasks.Check
		}
		for _, c := range t.Commands {
			if c.SQL && a.sql == nil {
				continue // not served in this configuration: 404, not 405 (tasks.Command.SQL)
			}
			f.Post(c.Path, guard, limit, a.command(c))
		}
	}
}

// authenticate maps the bearer token to its tenant when API_TOKENS is set.
func (a *api) authenticate(c *fiber.Ctx) error {
	if a.tokens.Open() {
		return c.Next()
	}
	token, ok := auth.BearerToken(c.Get(fiber.HeaderAuthorization))
	tenant, known := a.tokens.Tenant(token)
	if !ok || !known {
		c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="jobguard"`)
		return &problem.HTTPError{Status: http.StatusUnauthorized, Detail: "a valid bearer token is required", Field: "Authorization"}
	}
	c.Locals(localTenant, tenant)
	return c.Next()
}

// authenticateOrOperator is authenticate for a route operators read too: an operator token
// passes with no tenant, so the route shows what it shows on an open API (every tenant's keys).
func (a *api) authenticateOrOperator(c *fiber.Ctx) error {
	if token, ok := auth.BearerToken(c.Get(fiber.HeaderAuthorization)); ok {
		if _, op := a.operators.Tenant(token); op {
			return c.Next()
		}
	}
	return a.authenticate(c)
}

// tenantOf is the authenticated tenant, "" when the API is open.
func tenantOf(c *fiber.Ctx) string {
	t, _ := c.Locals(localTenant).(string)
	return t
}

// jobAnswer is the body of an enqueue answer.
type jobAnswer struct {
	JobID string `json:"job_id" openapi:"ref=JobID"`
	// Status is queued, or waiting for a fairly dispatched type's new job (waiting for its key's
	// turn in the admission layer, docs/FAIRNESS.md).
	Status       string `json:"status" openapi:"enum=queued|waiting"`
	Deduplicated bool   `json:"deduplicated"`
}

// enqueue serves POST /jobs/<type>. Its Redis round trips, the common case (firstTrip): the
// rate limit, the Idempotency-Key claim and the job's create in one pipeline; asynq's enqueue;
// the confirmation with the stored answer. The route has no rate-limit middleware: the take is
// the handler's, in that pipeline or (a request refused before Redis, a budget seen spent)
// alone first.
func (a *api) enqueue(t tasks.Task) fiber.Handler {
	return func(c *fiber.Ctx) error {
		req, jf, err := acceptJobRequest(c, t.Request())
		var idemKey string
		if err == nil {
			idemKey, err = idempotencyKeyOf(c)
		}
		if err != nil {
			// Refused before Redis, it still spends its budget, and a spent one is 429 first.
			if lerr := a.limiter.admitRequest(c); lerr != nil {
				return lerr
			}
			return err
		}
		trip := &firstTrip{a: a, c: c, idemKey: idemKey, tenant: req.Tenant()}
		if idemKey != "" {
			trip.fp = fingerprint(c.Method(), c.Path(), c.Body())
		}
		if a.limiter != nil {
			key := a.limiter.requestKey(c, req.Tenant())
			if !a.limiter.speculate(key) {
				if err := a.limiter.admit(c, key); err != nil {
					return err
				}
			} else {
				trip.rateKey = key
			}
		}
		spec := req.Spec()
		spec.Headers = traceHeaders(c)
		if !jf.StartBy.IsZero() {
			spec.StartBy = jf.StartBy
		}
		spec.Tags = append(spec.Tags, jf.Tags...) // the task's own, if any, and the body's
		// The answer is stored in the same round trip as the new job's dedup confirmation, or as
		// the duplicate's timeline event. Without a key there is none to store, and no Finally
		// lets a fair job's confirmation ride in its create's round trip.
		if trip.idemKey != "" {
			spec.Finally = trip.finally
		}
		trip.identity = a.prepareIdentity(req, &spec)
		defer trip.identity.settle(c.UserContext())
		spec.Alongside = trip.alongside()
		res, err := a.stack.Enqueue(c.UserContext(), a.client, spec)
		trip.identity.enqueued(err)
		if err != nil {
			if unknown, ok := engine.UnknownJob(err); ok && trip.claim != nil {
				// Its confirmation's reply was lost: the key stays claimed until the job is
				// known to stand or not (idempotency_settle.go).
				a.idem.settleUnknown(c.UserContext(), a.stack, trip.claim, answerFor(unknown), unknown.JobID)
			} else if !errors.Is(err, engine.ErrOutcomeUnknown) || trip.kept.cmd == nil {
				// An unknown outcome whose answer went with its confirmation keeps the claim
				// (onceFor says why).
				trip.release()
			}
			return a.enqueueError(trip, err)
		}
		a.idem.secure(c.UserContext(), trip.kept)
		ans := answerFor(res)
		c.Set(fiber.HeaderLocation, ans.location)
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Status(ans.status).Send(ans.body)
	}
}

// idempotencyKeyOf is the request's Idempotency-Key, "" when it sent none; a malformed one is 400.
func idempotencyKeyOf(c *fiber.Ctx) (string, error) {
	raw, present := idempotencyHeader(c)
	if !present {
		return "", nil
	}
	key, err := parseIdempotencyKey(raw)
	if err != nil {
		return "", &problem.HTTPError{Status: http.StatusBadRequest, Field: "Idempotency-Key", Detail: err.Error()}
	}
	return key, nil
}

// enqueueError answers an enqueue that did not create or find a job: the gate's own answers (429,
// the Idempotency-Key's, the identity's) as they are, the engine's errors mapped.
func (a *api) enqueueError(trip *firstTrip, err error) error {
	if lerr := trip.unsent(); lerr != nil {
		return lerr
	}
	var he *problem.HTTPError
	switch {
	case errors.Is(err, errReplay):
		return trip.replay()
	case errors.As(err, &he):
		return he
	case errors.Is(err, engine.ErrNotDurable):
		trip.forget()
		trip.c.Set(fiber.HeaderRetryAfter, "1")
		return &problem.HTTPError{Status: http.StatusServiceUnavailable, Code: problem.CodeNotDurable, Err: err,
			Detail: "the job was not confirmed by enough Redis replicas in time (DURABLE_REPLICAS) and is not accepted; it may still run once; retry later (with the same Idempotency-Key, to keep one effect)"}
	case errors.Is(err, engine.ErrOutcomeUnknown):
		return &problem.HTTPError{Status: http.StatusServiceUnavailable, Code: problem.CodeOutcomeUnknown, Err: err,
			Detail: "Redis did not answer in time: the job may have been queued; retry with the same Idempotency-Key to learn its outcome"}
	case errors.Is(err, engine.ErrBadTags):
		return problem.BadField("tags", tagsDetail+" ("+tagsProblem(err)+")")
	case errors.Is(err, engine.ErrStartBy):
		return problem.BadField("start_by", "start_by is before the job's first delivery may start")
	case errors.Is(err, engine.ErrDedupPending):
		trip.c.Set(fiber.HeaderRetryAfter, "1")
		return &problem.HTTPError{Status: http.StatusServiceUnavailable, Code: problem.CodeDedupPending, Detail: "a duplicate of a job whose enqueue is not confirmed yet; nothing was kept, retry shortly", Err: err}
	}
	return &problem.HTTPError{Status: http.StatusServiceUnavailable, Code: problem.CodeEnqueueFailed, Detail: "the job could not be queued; nothing was kept, retry later", Err: err}
}

func (a *api) countIdem(err error, stored *answer) {
	if a.metrics == nil {
		return
	}
	result := "new"
	switch {
	case errors.Is(err, errIdemInFlight):
		result = "conflict"
	case errors.Is(err, errIdemMismatch):
		result = "mismatch"
	case err != nil:
		return
	case stored != nil:
		result = "replayed"
	}
	a.metrics.idem.WithLabelValues(result).Inc()
}

// answerFor is the answer to an enqueue result.
func answerFor(res engine.Enqueued) answer {
	status := http.StatusAccepted
	if res.Deduplicated {
		status = http.StatusOK
	}
	st := "queued"
	if res.Waiting {
		st = "waiting"
	}
	body, _ := json.Marshal(jobAnswer{JobID: res.JobID, Status: st, Deduplicated: res.Deduplicated})
	return answer{status: status, body: body, location: "/jobs/" + res.JobID}
}

// acceptRequest is a request body as every write route takes it: decoded strictly, validated, and
// for the token's tenant only (403).
func acceptRequest(c *fiber.Ctx, empty tasks.Request) (tasks.Request, error) {
	if err := requireJSON(c); err != nil {
		return nil, err
	}
	return acceptBody(c, c.Body(), empty)
}

// acceptBody is acceptRequest of body (the request's, or what of it is the task's).
func acceptBody(c *fiber.Ctx, body []byte, empty tasks.Request) (tasks.Request, error) {
	req, err := decodeStrict(body, empty)
	if err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if tenant := tenantOf(c); tenant != "" && tenant != req.Tenant() {
		return nil, &problem.HTTPError{Status: http.StatusForbidden, Field: "tenant_id", Detail: "tenant_id is not the tenant of this token"}
	}
	return req, nil
}

// requireJSON answers 415 unless the request's body is application/json.
func requireJSON(c *fiber.Ctx) error {
	ct := c.Get(fiber.HeaderContentType)
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != fiber.MIMEApplicationJSON {
		return &problem.HTTPError{Status: http.StatusUnsupportedMediaType, Field: "Content-Type", Detail: fmt.Sprintf("the body must be application/json, not %q", ct)}
	}
	return nil
}

// decodeStrict reads a JSON body into req: one object, no unknown fields, every type as declared;
// errors name the field.
func decodeStrict(body []byte, req tasks.Request) (tasks.Request, error) {
	if err := decodeJSON(body, req); err != nil {
		return nil, err
	}
	return req, nil
}

// traceHeaders carries the request's trace context (its server span, itself continuing an
// incoming traceparent) to the job's deliveries.
func traceHeaders(c *fiber.Ctx) map[string]string { return engine.TraceHeaders(c.UserContext()) }

// jobView is GET /jobs/{id}.
type jobView struct {
	JobID       string         `json:"job_id" openapi:"ref=JobID"`
	Type        string         `json:"type"`
	Queue       string         `json:"queue"`
	Tenant      string         `json:"tenant"`
	Resource    string         `json:"resource"`
	Status      string         `json:"status" openapi:"ref=JobStatus"`
	Attempt     int64          `json:"attempt" openapi:"min=0"`
	MaxAttempts int64          `json:"max_attempts" openapi:"min=0"`
	WorkerID    string         `json:"worker_id,omitempty"`
	LeaseOwner  string         `json:"lease_owner,omitempty"`
	Fencing     int64          `json:"fencing_token"`
	CreatedAt   *time.Time     `json:"created_at,omitempty"`
	StartedAt   *time.Time     `json:"started_at,omitempty"`
	UpdatedAt   *time.Time     `json:"updated_at,omitempty"`
	HeartbeatAt *time.Time     `json:"heartbeat_at,omitempty"`
	FinishedAt  *time.Time     `json:"finished_at,omitempty"`
	StartBy     *time.Time     `json:"start_by,omitempty"`
	Tags        []string       `json:"tags,omitempty" openapi:"ref=Tags"`
	LastError   string         `json:"last_error,omitempty"`
	Result      string         `json:"result,omitempty"`
	Lease       leaseView      `json:"lease"`
	Deliveries  []deliveryView `json:"deliveries" openapi:"nullable"`
	Timeline    []engine.Event `json:"timeline" openapi:"nullable"`
	progressView
}

type leaseView struct {
	Owner        string `json:"owner,omitempty"`
	RemainingMS  int64  `json:"remaining_ttl_ms"`
	CurrentFence int64  `json:"current_fence"`
}

// deliveryView names an asynq task of the job, to find it in the UI.
type deliveryView struct {
	TaskID  string `json:"task_id"`
	Queue   string `json:"queue"`
	Current bool   `json:"current"`
}

func (a *api) load(c *fiber.Ctx) (engine.View, error) {
	id := c.Params("id")
	notFound := &problem.HTTPError{Status: http.StatusNotFound, Detail: "no job " + id}
	if !engine.ValidJobID(id) {
		return engine.View{}, notFound
	}
	v, err := a.stack.Get(c.UserContext(), id)
	if errors.Is(err, engine.ErrJobNotFound) && a.sql != nil {
		// Redis let the job go: its copy in SQL, if it was copied, is the job's history.
		v, err = history.Load(c.UserContext(), a.sql, id)
		if errors.Is(err, history.ErrNotFound) {
			err = engine.ErrJobNotFound
		}
	}
	if errors.Is(err, engine.ErrJobNotFound) {
		return v, notFound
	}
	if err != nil {
		return v, err
	}
	if t := tenantOf(c); t != "" && t != v.Record.Tenant {
		return v, notFound // another tenant's job is not there for this token
	}
	// An encrypted type's result is stored sealed, in Redis and in the SQL copy alike; the
	// tenant sees it decrypted. A key the ring lacks is a 500 whose log line names the key id.
	return a.stack.Open(v)
}

func (a *api) view(c *fiber.Ctx) error {
	v, err := a.load(c)
	if err != nil {
		return err
	}
	return c.JSON(newJobView(v))
}

// newJobView is the JSON of a job's view (GET /jobs/{id}, jobguard jobs get --output json).
func newJobView(v engine.View) jobView {
	r := v.Record
	out := jobView{
		JobID: r.JobID, Type: r.Type, Queue: r.Queue, Tenant: r.Tenant, Resource: r.Resource,
		Status: string(r.Status), Attempt: int64(r.Attempt), MaxAttempts: int64(r.MaxAttempts), WorkerID: r.WorkerID,
		LeaseOwner: r.LeaseOwner, Fencing: r.FencingToken, LastError: r.LastError, Result: r.Result,
		CreatedAt: stamp(r.CreatedAt), StartedAt: stamp(r.StartedAt), UpdatedAt: stamp(r.UpdatedAt),
		HeartbeatAt: stamp(r.HeartbeatAt), FinishedAt: stamp(r.FinishedAt), StartBy: stamp(r.StartBy), Tags: r.Tags,
		Lease:    leaseView{Owner: v.Lease.Owner, RemainingMS: v.Lease.Remaining.Milliseconds(), CurrentFence: v.Lease.Fence},
		Timeline: v.Timeline,
	}
	out.progressView = progressView{Progress: r.Progress, ProgressNote: r.ProgressNote}
	for n := 1; n <= r.Deliveries; n++ {
		id := engine.DeliveryID(r.JobID, n)
		out.Deliveries = append(out.Deliveries, deliveryView{TaskID: id, Queue: r.Queue, Current: id == r.Delivery})
	}
	return out
}

func (a *api) retry(c *fiber.Ctx) error {
	v, err := a.load(c)
	if err != nil {
		return err
	}
	id := v.Record.JobID
	waits, err := a.stack.Replay(c.UserContext(), a.client, id)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderLocation, "/jobs/"+id)
	status := "queued"
	if waits {
		// A fairly dispatched type's replay waits for its key's turn. Said from the replay, not
		// read back: the dispatcher may admit it before a read would see it waiting.
		status = "waiting"
	}
	return c.Status(http.StatusAccepted).JSON(jobAnswer{JobID: id, Status: status})
}

// stamp is a time for the view: nil (omitted) when not set.
func stamp(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
