package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/tasks"
)

// workflowRequest is the body of POST /workflows: nodes of registered task types, each payload the
// body its POST /jobs/<type> route takes (validated the same way), all of the workflow's tenant.
type workflowRequest struct {
	TenantID string                `json:"tenant_id"`
	Nodes    []workflowNodeRequest `json:"nodes" openapi:"minItems=1,maxItems=1000"`
}

type workflowNodeRequest struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload" openapi:"type=object"`
	Parents []string        `json:"parents" openapi:"optional"`
	Policy  string          `json:"policy" openapi:"optional,ref=NodePolicy"`
}

// workflowCreated is the body of POST /workflows' 202.
type workflowCreated struct {
	WorkflowID string            `json:"workflow_id" openapi:"ref=WorkflowID"`
	Nodes      map[string]string `json:"nodes" openapi:"items=JobID"`
}

// workflowView is GET /workflows/{id}.
type workflowView struct {
	WorkflowID string             `json:"workflow_id" openapi:"ref=WorkflowID"`
	Status     string             `json:"status" openapi:"ref=WorkflowStatus"`
	Nodes      []workflowNodeView `json:"nodes"`
}

type workflowNodeView struct {
	ID      string   `json:"id"`
	JobID   string   `json:"job_id" openapi:"ref=JobID"`
	Status  string   `json:"status" openapi:"ref=JobStatus,orEmpty"`
	Parents []string `json:"parents"`
	Policy  string   `json:"policy" openapi:"ref=NodePolicy"`
}

func (a *api) workflowRoutes(f *fiber.App) {
	guard, limit := a.authenticate, a.limiter.handler()
	f.Post("/workflows", guard, limit, a.createWorkflow)
	f.Get("/workflows/:id", guard, limit, a.getWorkflow)
	f.Post("/workflows/:id/cancel", guard, limit, a.cancelWorkflow)
	f.Get("/workflows/:id/events", guard, limit, a.workflowEvents)
	f.Post("/batches", guard, limit, a.createBatch)
	f.Get("/batches/:id", guard, limit, a.getBatch)
}

// taskOf is the registered task of type typ.
func (a *api) taskOf(typ string) (tasks.Task, bool) {
	for _, t := range a.tasks {
		if t.Type == typ {
			return t, true
		}
	}
	return tasks.Task{}, false
}

// nodeSpec is a node's job as its type's enqueue route would make it (validated, the token's
// tenant only), named field for errors ("nodes[2]"); the job is always its own (no dedup). A node
// whose task has an identity (an order) adds its claim to claims, to take before the enqueue.
func (a *api) nodeSpec(c *fiber.Ctx, tenant, field, node, typ string, payload json.RawMessage, claims *nodeClaims) (engine.Spec, error) {
	t, ok := a.taskOf(typ)
	if !ok {
		return engine.Spec{}, problem.BadField(field+".type", fmt.Sprintf("node %q: %q is not a task type", node, typ))
	}
	if len(payload) == 0 {
		return engine.Spec{}, problem.BadField(field+".payload", fmt.Sprintf("node %q: payload is required", node))
	}
	req, err := acceptBody(c, payload, t.Request())
	if err != nil {
		return engine.Spec{}, nodeError(field+".payload", node, err)
	}
	if req.Tenant() != tenant {
		return engine.Spec{}, problem.BadField(field+".payload.tenant_id", fmt.Sprintf("node %q: tenant_id is not the workflow's", node))
	}
	spec := req.Spec()
	spec.Dedup, spec.Headers = nil, traceHeaders(c)
	// The claim names a job id of its own: a node's job gets its id from the workflow.
	claims.add(a.prepareIdentity(req, &spec), field+".payload", node)
	spec.JobID = ""
	return spec, nil
}

// enqueueClaimed takes the nodes' identity claims, then runs enqueue (a workflow's or a batch's);
// a claim refused is enqueue's error, and nothing is enqueued. The claims this request made stay
// unless a failure that was not the request's own kept nothing (keepClaims).
func (a *api) enqueueClaimed(ctx context.Context, claims *nodeClaims, enqueue func(context.Context) (engine.WorkflowCreated, error)) (created engine.WorkflowCreated, err error) {
	defer func() { claims.settle(ctx, keepClaims(created.ID != "", err)) }()
	if err := claims.take(ctx); err != nil {
		return engine.WorkflowCreated{}, err
	}
	return enqueue(ctx)
}

// keepClaims says whether the orders a workflow's nodes claimed stay claimed after its enqueue
// ended with err: when it was created, or may have been (outcome unknown), and when it was
// refused for its content (a later node's order conflict, an invalid node). A claim taken before
// such a refusal holds this request's own content, and another request with the same content
// may already rely on it (answered "the same order"): released, other content could take the
// order under it. The single route never meets this: its claim is the last thing that can refuse
// it. Only a failure that was not the request's (Redis) releases them, as on the single route.
func keepClaims(created bool, err error) bool {
	var refused *problem.HTTPError
	switch {
	case created, errors.Is(err, engine.ErrOutcomeUnknown), errors.Is(err, engine.ErrInvalidWorkflow):
		return true
	case errors.As(err, &refused):
		return refused.Status < http.StatusInternalServerError
	}
	return false
}

// nodeError names a node's payload error by its path in the whole body.
func nodeError(field, node string, err error) error {
	var he *problem.HTTPError
	var fe *tasks.FieldError
	switch {
	case errors.As(err, &he):
		out := *he
		out.Field = strings.TrimSuffix(field+"."+he.Field, ".")
		out.Detail = fmt.Sprintf("node %q: %s", node, he.Detail)
		return &out
	case errors.As(err, &fe):
		return problem.BadField(field+"."+fe.Field, fmt.Sprintf("node %q: %s %s", node, fe.Field, fe.Detail))
	}
	return err
}

// workflowError is the answer to a workflow the engine refused.
func workflowError(err error, what string) error {
	var we *engine.WorkflowError
	var answered *problem.HTTPError
	switch {
	case errors.As(err, &answered):
		return err // a node's identity claim refused (nodeClaims.take), already naming its field
	case errors.As(err, &we) && we.Field == "nodes":
		return problem.BadField(what, we.Detail)
	case errors.As(err, &we):
		return problem.BadField(fmt.Sprintf("%s[%d].%s", what, we.Index, we.Field), fmt.Sprintf("node %q: %s %s", we.Node, we.Field, we.Detail))
	case errors.Is(err, engine.ErrOutcomeUnknown):
		return &problem.HTTPError{Status: http.StatusServiceUnavailable, Code: problem.CodeOutcomeUnknown, Err: err,
			Detail: "Redis did not answer in time: the " + what + " may have been created; retry with the same Idempotency-Key to learn its outcome"}
	}
	return &problem.HTTPError{Status: http.StatusServiceUnavailable, Code: problem.CodeEnqueueFailed, Err: err, Detail: "the " + what + " could not be created; nothing will run, retry later"}
}

// notDurableError answers a workflow or batch that was created but whose confirmation its
// replicas did not acknowledge in time (durable mode).
func notDurableError(err error) error {
	return &problem.HTTPError{Status: http.StatusServiceUnavailable, Code: problem.CodeNotDurable, Err: err,
		Detail: "created, but its replicas did not acknowledge it in time; retry with the same Idempotency-Key to get it"}
}

// createWorkflow is POST /workflows.
func (a *api) createWorkflow(c *fiber.Ctx) error {
	if err := requireJSON(c); err != nil {
		return err
	}
	var req workflowRequest
	if err := decodeJSON(c.Body(), &req); err != nil {
		return err
	}
	if err := a.checkTenant(c, req.TenantID); err != nil {
		return err
	}
	if len(req.Nodes) == 0 || len(req.Nodes) > engine.MaxWorkflowNodes {
		return problem.BadField("nodes", fmt.Sprintf("a workflow has 1 to %d nodes, not %d", engine.MaxWorkflowNodes, len(req.Nodes)))
	}
	w := engine.WorkflowSpec{Tenant: req.TenantID, Nodes: make([]engine.WorkflowNode, len(req.Nodes))}
	var claims nodeClaims
	for i, n := range req.Nodes {
		field := fmt.Sprintf("nodes[%d]", i)
		spec, err := a.nodeSpec(c, req.TenantID, field, n.ID, n.Type, n.Payload, &claims)
		if err != nil {
			return err
		}
		// Strings of the request alias fasthttp's buffers: the node ids outlive the handler in
		// the answer stored for the Idempotency-Key and in Redis.
		parents := make([]string, len(n.Parents))
		for j, p := range n.Parents {
			parents[j] = strings.Clone(p)
		}
		w.Nodes[i] = engine.WorkflowNode{ID: strings.Clone(n.ID), Spec: spec, Parents: parents, Policy: strings.Clone(n.Policy)}
	}
	if err := a.stack.CheckWorkflow(w); err != nil {
		return workflowError(err, "nodes") // before any node claims its order
	}
	return a.once(c, req.TenantID, func(keep answerKeeper) (answer, error) {
		if keep != nil {
			w.Finally = func(ctx context.Context, pipe redis.Pipeliner, created engine.WorkflowCreated) {
				keep(ctx, pipe, workflowAnswer(created), created.Decision)
			}
		}
		created, err := a.enqueueClaimed(c.UserContext(), &claims, func(ctx context.Context) (engine.WorkflowCreated, error) {
			return a.stack.EnqueueWorkflow(ctx, w)
		})
		if created.ID == "" {
			return answer{}, workflowError(err, "nodes")
		}
		if err != nil {
			return workflowAnswer(created), notDurableError(err)
		}
		return workflowAnswer(created), nil
	})
}

// workflowAnswer is the answer to a workflow created.
func workflowAnswer(created engine.WorkflowCreated) answer {
	body, _ := json.Marshal(workflowCreated{WorkflowID: created.ID, Nodes: created.Jobs})
	return answer{status: http.StatusAccepted, body: body, location: "/workflows/" + created.ID}
}

// checkTenant refuses a body's tenant_id that is missing, malformed or not the token's.
func (a *api) checkTenant(c *fiber.Ctx, tenant string) error {
	if err := tasks.CheckID("tenant_id", tenant); err != nil {
		return err
	}
	if t := tenantOf(c); t != "" && t != tenant {
		return &problem.HTTPError{Status: http.StatusForbidden, Field: "tenant_id", Detail: "tenant_id is not the tenant of this token"}
	}
	return nil
}

// answerKeeper queues the storing of create's answer for the request's Idempotency-Key in pipe,
// the round trip of what create confirms: a confirmation whose reply is lost (outcome unknown)
// has its answer stored all the same, so a retry with the key meets it instead of creating again.
// It is nil for a request without a key: a confirmation with nothing behind it goes as EVALSHA.
// decided is the key the confirmation confirms, when the answer goes in its pipeline on one Redis
// node (idempotency.complete), else "".
type answerKeeper func(ctx context.Context, pipe redis.Pipeliner, ans answer, decided string)

// once runs create under the request's Idempotency-Key, when it has one: the same key and body
// get the stored answer again (Idempotent-Replayed), another body 422, a request still in flight
// 409; the answer is stored once create succeeded (through keep, if create used it), and the
// claim released when it failed (a claim whose answer keep stored is not released).
func (a *api) once(c *fiber.Ctx, tenant string, create func(keep answerKeeper) (answer, error)) error {
	return a.onceFor(c, tenant, fingerprint(c.Method(), c.Path(), c.Body()), create)
}

// onceFor is once for a request fingerprinted fp (a route whose query changes what it does puts
// that in the fingerprint, so the same key and body with another query is 422, not a replay).
func (a *api) onceFor(c *fiber.Ctx, tenant, fp string, create func(keep answerKeeper) (answer, error)) error {
	key, err := idempotencyKeyOf(c)
	if err != nil {
		return err
	}
	trip := &firstTrip{a: a, c: c}
	var cl *claim
	if key != "" {
		var stored *answer
		cl, stored, err = a.idem.begin(c.UserContext(), tenant, key, fp)
		if err := trip.judgeClaim(stored, err); errors.Is(err, errReplay) {
			return trip.replay()
		} else if err != nil {
			return err
		}
	}
	var kept keptAnswer
	var keep answerKeeper
	if cl != nil {
		keep = func(ctx context.Context, pipe redis.Pipeliner, ans answer, decided string) {
			kept = keptAnswer{c: cl, ans: ans, cmd: a.idem.complete(ctx, pipe, cl, ans, decided)}
		}
	}
	ans, err := create(keep)
	if ans.retryAfter != "" {
		c.Set(fiber.HeaderRetryAfter, ans.retryAfter)
	}
	if errors.Is(err, errAnswerNotKept) {
		if cl != nil {
			a.idem.release(c.UserContext(), cl)
		}
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Status(ans.status).Send(ans.body)
	}
	if err != nil && ans.status == 0 {
		if cl != nil {
			unknown := errors.Is(err, engine.ErrOutcomeUnknown)
			if kept.cmd != nil && !unknown {
				// Stored with a confirmation that did not take (expired, gone): nothing stands.
				a.idem.forget(c.UserContext(), cl)
			}
			// An unknown outcome whose answer went with its confirmation keeps the claim: both
			// may still land (a pipeline sent again after its reply was lost), and a retry let in
			// now would create again. The claim runs out just past the deadline, when neither can.
			if kept.cmd == nil || !unknown {
				a.idem.release(c.UserContext(), cl)
			}
		}
		return err
	}
	// An answer with an error (created, but its replicas did not acknowledge it in time) is
	// stored too: a retry with the key gets the same workflow, never a second one.
	if cl != nil && kept.cmd == nil {
		a.idem.keepNow(c.UserContext(), cl, ans)
	}
	a.idem.secure(c.UserContext(), kept)
	if err != nil {
		return err
	}
	if ans.location != "" {
		c.Set(fiber.HeaderLocation, ans.location)
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(ans.status).Send(ans.body)
}

// errAnswerNotKept: create's answer is sent but not stored for the Idempotency-Key, whose claim
// is released (nothing was kept, and the failure may pass: a retry with the key runs again).
var errAnswerNotKept = errors.New("app: answer not kept for the Idempotency-Key")

// loadWorkflow reads the workflow of the path's id, 404 when there is none or it is another
// tenant's.
func (a *api) loadWorkflow(c *fiber.Ctx, what string) (engine.WorkflowView, error) {
	id := strings.Clone(c.Params("id"))
	notFound := &problem.HTTPError{Status: http.StatusNotFound, Detail: "no " + what + " " + id}
	v, err := a.stack.Workflow(c.UserContext(), id)
	if errors.Is(err, engine.ErrWorkflowNotFound) {
		return v, notFound
	}
	if err != nil {
		return v, err
	}
	if t := tenantOf(c); t != "" && t != v.Tenant {
		return v, notFound
	}
	return v, nil
}

func viewOfWorkflow(v engine.WorkflowView) workflowView {
	out := workflowView{WorkflowID: v.ID, Status: v.Status, Nodes: make([]workflowNodeView, len(v.Nodes))}
	for i, n := range v.Nodes {
		parents := n.Parents
		if parents == nil {
			parents = []string{}
		}
		out.Nodes[i] = workflowNodeView{ID: n.ID, JobID: n.JobID, Status: string(v.NodeStatus[i]), Parents: parents, Policy: n.Policy}
	}
	return out
}

// getWorkflow is GET /workflows/{id}.
func (a *api) getWorkflow(c *fiber.Ctx) error {
	v, err := a.loadWorkflow(c, "workflow")
	if err != nil {
		return err
	}
	return c.JSON(viewOfWorkflow(v))
}

// cancelWorkflow is POST /workflows/{id}/cancel: no node is released from then on, every node not
// ended is cancelled; 409 when the workflow had ended other than cancelled. A cancel of a cancelled
// workflow is answered as the first was (200, the workflow): a client whose first cancel got a 503
// (Redis stalled, the cancel took) retries it, and must learn that it took.
func (a *api) cancelWorkflow(c *fiber.Ctx) error {
	v, err := a.loadWorkflow(c, "workflow")
	if err != nil {
		return err
	}
	if v.Status == "cancelled" {
		return c.JSON(viewOfWorkflow(v))
	}
	err = a.stack.CancelWorkflow(c.UserContext(), v.ID)
	if errors.Is(err, engine.ErrWorkflowEnded) {
		if now, lerr := a.loadWorkflow(c, "workflow"); lerr == nil && now.Status == "cancelled" {
			return c.JSON(viewOfWorkflow(now)) // another cancel won the race
		}
		return &problem.HTTPError{Status: http.StatusConflict, Code: problem.CodeWorkflowEnded, Detail: "the workflow has ended (" + problem.Reason(err, engine.ErrWorkflowEnded) + ")"}
	}
	if err != nil {
		return err
	}
	if v, err = a.loadWorkflow(c, "workflow"); err != nil {
		return err
	}
	return c.JSON(viewOfWorkflow(v))
}
