package httpapi

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/jobguard/jobguard/app/admin"
	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/apidoc"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/schedule"
	"github.com/jobguard/jobguard/tasks"
)

// openAPIPath serves the API's OpenAPI 3.1 description, without a token: it tells nothing a client
// could not learn.
const openAPIPath = "/openapi.json"

// openAPIRoute serves doc, the API's description (apiDocument), built once at start-up.
func openAPIRoute(f *fiber.App, doc []byte) {
	f.Get(openAPIPath, func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Send(doc)
	})
}

// apiDocument is the OpenAPI 3.1 description of the HTTP API that serves list's task types:
// the core routes' descriptions (openapi_routes.go), each task's enqueue, bulk, read-model and
// command routes (taskOperations), and the JSON Schemas of the Go types the handlers decode and
// answer with (internal/apidoc). Nothing in it is kept by hand apart from the routes' prose.
func apiDocument(list []tasks.Task) ([]byte, error) {
	d := apidoc.New(apidoc.Info{Title: "jobguard", Version: "1", License: "MIT", Description: apiDescription})
	d.Tags = []apidoc.Tag{
		{Name: "jobs"},
		{Name: "workflows", Description: "Workflows (DAGs of jobs) and batches (jobs with callbacks)."},
		{Name: "read models", Description: "Routes the example task types bring (tasks/); a clone without them does not serve these."},
		{Name: "schedules"},
		{Name: "admin"},
		{Name: "meta"},
	}
	d.Security = []string{"bearerToken", ""}
	d.Problem = "Problem"
	defineSchemas(d)
	defineShared(d)
	d.Add(coreOperations()...)
	for _, t := range list {
		d.Add(taskOperations(d, t)...)
	}
	return d.JSON()
}

// apiDescription is the document's introduction.
const apiDescription = "jobguard's HTTP API: enqueue jobs (one POST /jobs/<type> per task type), read and long-poll them, stream their timeline, cancel and retry them, the example task types' read models and commands, the schedules (operators) and the admin endpoints.\n\nErrors are `application/problem+json` (RFC 9457) with a stable `code` and `type` https://jobguard.dev/problems/<code> (the README's error table). Every answer carries `X-Request-ID`.\n\nAnswers no single operation lists: a path that no route serves is 404 `not_found`; a path that exists for other methods is 405 `method_not_allowed` with `Allow` (POST /jobs/<segment> is the enqueue family: an unknown task type is 404, not 405); a method this server does not implement is 501 `unknown_method`; a request that could not be read, or whose body length is ambiguous (Transfer-Encoding with Content-Length, a transfer coding other than chunked, Content-Length on several lines: the connection is closed after the answer), is 400 `malformed_request`, 408 `request_timeout`, 413 `body_too_large` or 431 `header_too_large`. Every GET path also answers HEAD. An operation with `x-requires` is served only when that variable is set; without it its path is 404 for every method. The monitoring UI under /monitoring is not part of this API."

// defineSchemas names the schemas the routes share: the values the code checks (ids, statuses,
// tags, problem codes) from the code that checks them, and the views under the names clients know.
func defineSchemas(d *apidoc.Document) {
	d.Define("JobID", apidoc.Schema{"type": "string", "pattern": jobstore.JobIDPattern})
	d.Define("WorkflowID", apidoc.Schema{"type": "string", "pattern": jobstore.WorkflowIDPattern})
	d.Define("ID", apidoc.Schema{"type": "string", "pattern": tasks.IDPattern})
	var statuses []string
	for _, s := range jobstore.Statuses {
		statuses = append(statuses, string(s))
	}
	d.Define("JobStatus", apidoc.Schema{"type": "string", "enum": statuses})
	d.Define("WorkflowStatus", apidoc.Schema{"type": "string", "enum": []string{
		jobstore.WorkflowRunning, jobstore.WorkflowDone, jobstore.WorkflowFailed, jobstore.WorkflowCancelled}})
	// A schedule's policies are types of their own: every member of the type gets the enum.
	d.Define("ScheduleOverlap", apidoc.Schema{"type": "string", "enum": []schedule.Overlap{schedule.Skip, schedule.Allow, schedule.Replace}})
	d.Name(schedule.Overlap(""), "ScheduleOverlap")
	d.Define("ScheduleCatchUp", apidoc.Schema{"type": "string", "enum": []schedule.CatchUp{schedule.None, schedule.Latest, schedule.All}})
	d.Name(schedule.CatchUp(""), "ScheduleCatchUp")
	d.Define("NodePolicy", apidoc.Schema{"type": "string", "enum": []string{jobstore.PolicyAllDone, jobstore.PolicyAllEnded}})
	d.Define("Tags", apidoc.Schema{"type": "array", "maxItems": jobstore.MaxTags,
		"items": apidoc.Schema{"type": "string", "pattern": fmt.Sprintf("^[A-Za-z0-9._:=-]{1,%d}$", jobstore.MaxTagLen)}})
	d.Define("CancelReason", apidoc.Schema{"type": "string", "maxLength": maxCancelReason, "pattern": `^[^\r\n]*$`})
	var codes []string
	for _, k := range problem.Kinds {
		codes = append(codes, k.Code)
	}
	d.Define("ProblemCode", apidoc.Schema{"type": "string", "enum": codes})
	d.Define("ProblemType", apidoc.Schema{"type": "string", "format": "uri",
		"pattern": "^" + strings.ReplaceAll(problem.TypeBase, ".", `\.`) + "[a-z_]+$"})
	d.Define("Problem", problem.Details{})
	d.Define("BulkItem", apidoc.Schema{"type": "object"}) // one enqueue body of the route's type, validated as that route does
	// The event streams' data: named, so that clients (and the tests' stream checker) find them.
	d.Define("Event", engine.Event{})
	d.Define("EventEnd", eventEnd{})
	d.Define("WorkflowNodeEvent", workflowNodeEvent{})
	d.Define("WorkflowEventEnd", workflowEventEnd{})
	describeSchemas(d)
	for name, v := range map[string]any{
		"JobAccepted": jobAnswer{}, "Job": jobView{}, "JobList": listView{}, "Cancelled": cancelAnswer{},
		"CancelRequest": cancelRequest{}, "Health": admin.Health{}, "ScheduleOverview": schedule.Overview{},
		"ScheduleJobs": scheduleJobs{}, "SchedulePaused": schedulePaused{}, "WorkflowRequest": workflowRequest{},
		"WorkflowCreated": workflowCreated{}, "Workflow": workflowView{}, "BatchRequest": batchRequest{},
		"BatchCreated": batchCreated{}, "Batch": batchView{}, "NodeJob": batchJobRequest{},
		"BulkRequest": bulkRequest{}, "BulkAnswer": bulkAnswer{}, "Fairness": fairnessAnswer{},
	} {
		d.Name(v, name)
	}
}

// describeSchemas says what the shared schemas' types' doc comments say.
func describeSchemas(d *apidoc.Document) {
	for name, text := range map[string]string{
		"JobID": "16 hex digits of the job's resource's hash tag, a dash, 12 hex digits of its creation time (Unix ms) " +
			"and 16 random hex digits.",
		"WorkflowID": "`wf-`, 12 hex digits of the creation time, 16 random hex digits.",
		"Tags": "The job's tags: labels for lists and searches (GET /jobs?tag=), at most 8, each 1-64 characters of " +
			"A-Z a-z 0-9 . _ : = -; duplicates are folded. Anything else is 400 naming `tags`.",
		"WorkflowStatus": "running until every node has ended; then done (every node done), failed (a node did not end done) " +
			"or cancelled.",
		"NodePolicy": "all_done (default): released when every parent is done, skipped when one is not; all_ended: " +
			"released when every parent has ended, however.",
		"Problem":           "An RFC 9457 problem; `type` is " + problem.TypeBase + " followed by `code`.",
		"EventEnd":          "The data of a stream's last event (`event: end`): the status the job ended with.",
		"WorkflowNodeEvent": "The data of a workflow stream's `event: node`.",
		"WorkflowEventEnd":  "The data of a workflow stream's `event: end`.",
	} {
		d.Describe(name, text)
	}
}

// rateHeaders are the headers of an answer that went through the rate limit.
var rateHeaders = []string{"X-Request-ID", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}

// replayedHeaders are an answer's headers on a route that takes an Idempotency-Key.
var replayedHeaders = append(append([]string{}, rateHeaders...), "Idempotent-Replayed")

// defineShared adds the headers, parameters, answers and security schemes the routes share.
func defineShared(d *apidoc.Document) {
	d.Header("X-Request-ID", apidoc.Header{Description: "The request's id (an incoming X-Request-ID of up to 128 visible characters is kept); also the " +
		"problem's `request_id` and the access log's.", Schema: apidoc.Schema{"type": "string"}})
	d.Header("RateLimit-Limit", apidoc.Header{Description: "The burst the caller's budget allows (RATE_LIMIT_BURST); only when RATE_LIMIT is set.",
		Schema: apidoc.Schema{"type": "integer", "minimum": 0}})
	d.Header("RateLimit-Remaining", apidoc.Header{Description: "Requests left in the budget now.",
		Schema: apidoc.Schema{"type": "integer", "minimum": 0}})
	d.Header("RateLimit-Reset", apidoc.Header{Description: "Seconds until the budget is full again.",
		Schema: apidoc.Schema{"type": "integer", "minimum": 0}})
	d.Header("Retry-After", apidoc.Header{Description: "Seconds to wait before retrying.", Required: true,
		Schema: apidoc.Schema{"type": "integer", "minimum": 1}})
	d.Header("WWW-Authenticate", apidoc.Header{Description: "`Bearer realm=\"jobguard\"`.", Required: true,
		Schema: apidoc.Schema{"type": "string"}})
	d.Header("Allow", apidoc.Header{Description: "The methods the path takes, e.g. `GET, HEAD`.", Required: true,
		Schema: apidoc.Schema{"type": "string", "minLength": 1}})
	d.Header("Location", apidoc.Header{Description: "The job's view, `/jobs/{id}`.", Required: true,
		Schema: apidoc.Schema{"type": "string", "pattern": "^/jobs/"}})
	d.Header("Idempotent-Replayed", apidoc.Header{Description: "`true` when the answer is the stored answer of an earlier request with the same Idempotency-Key.",
		Schema: apidoc.Schema{"type": "string", "enum": []string{"true"}}})
	d.Parameter("JobIDPath", apidoc.Param{Name: "id", In: "path", Description: "The job's id (one of another tenant is not found).",
		Schema: apidoc.Schema{"type": "string"}})
	d.Parameter("ScheduleName", apidoc.Param{Name: "name", In: "path", Schema: apidoc.Schema{"type": "string"}})
	d.Parameter("IdempotencyKey", apidoc.Param{Name: "Idempotency-Key", In: "header", Description: "draft-ietf-httpapi-idempotency-key-header: an sf-string (`\"abc\"`) or a bare token (no " +
		"quotes, spaces, backslashes, commas or semicolons). The first answer is stored for " +
		"IDEMPOTENCY_RETENTION and replayed to a retry of the same request.", Schema: apidoc.Schema{"type": "string"}})
	d.Parameter("TenantPath", apidoc.Param{Name: "tenant", In: "path", Description: "The tenant: with API_TOKENS it must be the token's.",
		Schema: apidoc.Schema{"type": "string"}})
	d.Parameter("WorkflowIDPath", apidoc.Param{Name: "id", In: "path", Description: "The workflow's (or batch's) id (one of another tenant is not found).",
		Schema: apidoc.Schema{"type": "string"}})
	d.Response("BadRequest", apidoc.Response{Description: "A parameter, header or body field (named by `field`) is invalid, or a single-valued header " +
		"(Authorization, Content-Type, Host, Last-Event-ID, X-Request-ID) is sent on several lines. " +
		"Codes: `validation_failed`.", Headers: rateHeaders, Codes: []string{problem.CodeValidationFailed}})
	d.Response("Unauthorized", apidoc.Response{Description: "No valid bearer token (only when API_TOKENS is set). Codes: `unauthorized`.",
		Headers: []string{"X-Request-ID", "WWW-Authenticate"},
		Codes:   []string{problem.CodeUnauthorized}})
	d.Response("OperatorUnauthorized", apidoc.Response{Description: "No valid operator bearer token (only when API_TOKENS or OPERATOR_TOKENS is set). Codes: " +
		"`unauthorized`.", Headers: []string{"X-Request-ID", "WWW-Authenticate"}, Codes: []string{problem.CodeUnauthorized}})
	d.Response("Forbidden", apidoc.Response{Description: "The tenant named by `field` (body, path or query) is not the token's. Codes: `forbidden_tenant`.",
		Headers: rateHeaders,
		Codes:   []string{problem.CodeForbiddenTenant}})
	d.Response("OperatorForbidden", apidoc.Response{Description: "A tenant's token on an operator route. Codes: `operator_required`.",
		Headers: []string{"X-Request-ID"},
		Codes:   []string{problem.CodeOperatorRequired}})
	d.Response("NotFound", apidoc.Response{Description: "No such job, schedule or read-model entry; another tenant's job is not found either. Codes: " +
		"`not_found`.", Headers: rateHeaders, Codes: []string{problem.CodeNotFound}})
	d.Response("NotServed", apidoc.Response{Description: "This process does not serve the route here: the API on a worker, or an admin endpoint on " +
		"HTTP_ADDR when ADMIN_ADDR is set (and the other way round). Codes: `not_found`.",
		Headers: []string{"X-Request-ID"},
		Codes:   []string{problem.CodeNotFound}})
	d.Response("MethodNotAllowed", apidoc.Response{Description: "The path exists but not for this method; `Allow` lists the methods it takes. Codes: " +
		"`method_not_allowed`.", Headers: []string{"X-Request-ID", "Allow"}, Codes: []string{problem.CodeMethodNotAllowed}})
	d.Response("BodyTooLarge", apidoc.Response{Description: "The body is over BODY_LIMIT. Codes: `body_too_large`.",
		Headers: []string{"X-Request-ID"},
		Codes:   []string{problem.CodeBodyTooLarge}})
	d.Response("UnsupportedMediaType", apidoc.Response{Description: "The body is not application/json. Codes: `unsupported_media_type`.",
		Headers: rateHeaders,
		Codes:   []string{problem.CodeUnsupportedMediaType}})
	d.Response("RateLimited", apidoc.Response{Description: "The tenant's (or, unauthenticated, the client address's) budget is spent. Codes: `rate_limited`.",
		Headers: []string{"X-Request-ID", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "Retry-After"},
		Codes:   []string{problem.CodeRateLimited}})
	d.Response("EventsLimited", apidoc.Response{Description: "The tenant's (or, unauthenticated, the client address's) budget is spent (`rate_limited`), or, " +
		"for an event stream or a long-poll, it has as many of them open on this API process as " +
		"EVENT_STREAMS_PER_TENANT allows, or the process as many as EVENT_STREAMS_MAX " +
		"(`too_many_streams`).",
		Headers: []string{"X-Request-ID", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "Retry-After"},
		Codes:   []string{problem.CodeRateLimited, problem.CodeTooManyStreams}})
	d.Response("IdempotencyInFlight", apidoc.Response{Description: "A request with this Idempotency-Key is still being processed. Codes: `idempotency_key_in_flight`.",
		Headers: rateHeaders, Codes: []string{problem.CodeIdempotencyInFlight}})
	d.Response("IdempotencyKeyReused", apidoc.Response{Description: "The Idempotency-Key was used for a different request. Codes: `idempotency_key_reused`.",
		Headers: rateHeaders, Codes: []string{problem.CodeIdempotencyKeyReused}})
	d.Response("Internal", apidoc.Response{Description: "A fault of jobguard, logged under `request_id`. Codes: `internal`.",
		Headers: []string{"X-Request-ID"},
		Codes:   []string{problem.CodeInternal}})
	d.Response("Unavailable", apidoc.Response{Description: "Redis did not answer (in time); nothing was changed. Codes: `redis_unavailable`.",
		Headers: []string{"X-Request-ID", "Retry-After"},
		Codes:   []string{problem.CodeRedisUnavailable}})
	d.SecurityScheme("bearerToken", apidoc.SecurityScheme{Scheme: "bearer", Description: "A token of API_TOKENS: the tenant it names is the only one the request sees. Without " +
		"API_TOKENS the API is open."})
	d.SecurityScheme("operatorToken", apidoc.SecurityScheme{Scheme: "bearer", Description: "A token of OPERATOR_TOKENS. Open when neither API_TOKENS nor OPERATOR_TOKENS is set."})
}

// taskOperations are the routes a task type brings: POST /jobs/<type> (its Request with the job's
// own members, jobFields), POST /jobs/<type>/bulk, its read models (Route.Response) and commands
// (Command.Accept, Command.Replies).
func taskOperations(d *apidoc.Document, t tasks.Task) []apidoc.Operation {
	name := exportedName(t.Type)
	d.Define(name+"Job", d.Merge(t.Request(), jobFields{}))
	d.Describe(name+"Job", "The body of POST /jobs/"+t.Type+": the task's request, and the job's optional deadline (start_by) and tags.")
	accepted := append(append([]string{}, rateHeaders...), "Location", "Idempotent-Replayed")
	inFlight := apidoc.Response{Status: http.StatusConflict, Headers: rateHeaders, Codes: []string{problem.CodeIdempotencyInFlight},
		Description: "A request with this Idempotency-Key is still being processed. Codes: `idempotency_key_in_flight`."}
	if _, identified := t.Request().(tasks.Identified); identified {
		inFlight.Codes = append(inFlight.Codes, problem.CodeOrderConflict)
		inFlight.Description = "A request with this Idempotency-Key is still being processed, or the order was submitted before with different content. " +
			"Codes: `idempotency_key_in_flight`, `order_conflict`."
	}
	ops := []apidoc.Operation{{
		Method: http.MethodPost, Path: "/jobs/" + t.Type, ID: "enqueue" + name, Summary: "Enqueue a " + t.Type + " job",
		Description: t.Description,
		Tags:        []string{"jobs"}, Params: []apidoc.Param{{Ref: "IdempotencyKey"}}, Request: apidoc.Ref(name + "Job"),
		Responses: withProblems([]apidoc.Response{
			{Status: http.StatusOK, Description: "A duplicate of a job that is still live: its id (deduplicated: true).",
				Headers: accepted,
				Body:    jobAnswer{}},
			{Status: http.StatusAccepted, Description: "Queued.", Headers: accepted, Body: jobAnswer{}},
			inFlight,
			{Status: http.StatusServiceUnavailable, Description: "Redis did not answer, the job could not be queued, a duplicate's first enqueue is not " +
				"confirmed yet, " +
				"or the outcome is unknown (retry with the same Idempotency-Key), or (durable mode) the replicas did not acknowledge the job in time. " +
				"Codes: `redis_unavailable`, `enqueue_failed`, `dedup_pending`, `outcome_unknown`, `not_durable`.",
				Headers: []string{"X-Request-ID", "Retry-After"},
				Codes:   []string{problem.CodeRedisUnavailable, problem.CodeEnqueueFailed, problem.CodeDedupPending, problem.CodeOutcomeUnknown, problem.CodeNotDurable}},
		}, "BadRequest", "Unauthorized", "Forbidden", "NotServed", "BodyTooLarge", "UnsupportedMediaType", "IdempotencyKeyReused", "RateLimited", "Internal"),
	}, {
		Method: http.MethodPost, Path: "/jobs/" + t.Type + "/bulk", ID: "bulk" + name,
		Summary: fmt.Sprintf("Enqueue up to %d %s jobs at once", engine.MaxBulk, t.Type),
		Description: "Each item is answered as POST /jobs/" + t.Type + " would answer it (new, deduplicated or refused), in shared round trips: " +
			"one pipeline of creates, the asynq enqueues a few at once, one pipeline of confirmations. With atomic, a refused item means none is created. " +
			"The request takes one unit of the rate limit; an Idempotency-Key covers the body and the mode (atomic). Each item is a " + name + "Job.",
		Tags: []string{"jobs"},
		Params: []apidoc.Param{{Ref: "IdempotencyKey"}, {Name: "atomic", In: "query", Description: "true: all or nothing.",
			Schema: apidoc.Schema{"type": "string", "enum": []string{"true", "false"}}}},
		Request: bulkRequest{},
		Responses: withProblems([]apidoc.Response{
			{Status: http.StatusOK, Description: "Every item's answer.", Headers: replayedHeaders, Body: bulkAnswer{}},
		}, "BadRequest", "Unauthorized", "Forbidden", "NotServed", "IdempotencyInFlight", "BodyTooLarge", "UnsupportedMediaType", "IdempotencyKeyReused", "RateLimited", "Internal", "Unavailable"),
	}}
	for _, r := range t.Routes {
		ops = append(ops, readModelOperation(r, name))
	}
	for _, c := range t.Commands {
		ops = append(ops, commandOperation(c, name))
	}
	return ops
}

// readModelOperation is GET <r.Path>: its parameters (the tenant's is TenantPath), its answer.
func readModelOperation(r tasks.Route, typeName string) apidoc.Operation {
	var params []apidoc.Param
	for _, p := range r.ParamNames() {
		if p == r.Tenant {
			params = append(params, apidoc.Param{Ref: "TenantPath"})
			continue
		}
		params = append(params, apidoc.Param{Name: p, In: "path", Schema: apidoc.Schema{"type": "string"}})
	}
	var body any = apidoc.Schema{}
	if r.Response != nil {
		body = r.Response
	}
	summary := r.Summary
	if summary == "" {
		summary = "A read model of " + typeName
	}
	return apidoc.Operation{
		Method: http.MethodGet, Path: r.Path, ID: "read" + exportedName(fixedSegments(r.Path)), Summary: summary,
		Tags: []string{"read models"}, Params: params,
		Responses: withProblems([]apidoc.Response{
			{Status: http.StatusOK, Description: "The read model.", Headers: rateHeaders, Body: body},
		}, "BadRequest", "Unauthorized", "Forbidden", "NotFound", "RateLimited", "Internal", "Unavailable"),
	}
}

// commandOperation is POST <c.Path>: the body Accept decodes, Do's replies and the errors a
// command's are mapped to (Conflict: 409).
func commandOperation(c tasks.Command, typeName string) apidoc.Operation {
	var replies []apidoc.Response
	for _, r := range c.Replies {
		replies = append(replies, apidoc.Response{Status: r.Status, Description: r.Description,
			Headers: append(append([]string{}, rateHeaders...), "Location"), Body: r.Body})
	}
	if replies == nil {
		replies = []apidoc.Response{{Status: http.StatusOK, Description: "Done.", Headers: rateHeaders, Body: apidoc.Schema{}}}
	}
	notFound := apidoc.Response{Status: http.StatusNotFound, Ref: "NotFound"}
	var ext map[string]any
	if c.SQL {
		ext = map[string]any{"x-requires": "DATABASE_URL"}
		notFound = apidoc.Response{Status: http.StatusNotFound, Headers: rateHeaders, Codes: []string{problem.CodeNotFound},
			Description: "Not served: this process has no DATABASE_URL, so POST " + c.Path + " is not a route (404 for every method; `x-requires`). Codes: `not_found`."}
	}
	summary := c.Summary
	if summary == "" {
		summary = "A command of " + typeName
	}
	return apidoc.Operation{
		Method: http.MethodPost, Path: c.Path, ID: "post" + exportedName(c.Path), Summary: summary,
		Tags: []string{"read models"}, Request: c.Accept(), Extensions: ext,
		Responses: withProblems(append(replies, notFound,
			apidoc.Response{Status: http.StatusConflict, Headers: rateHeaders, Codes: []string{problem.CodeOrderConflict},
				Description: "The request contradicts what exists (tasks.Conflict). Codes: `order_conflict`."}),
			"BadRequest", "Unauthorized", "Forbidden", "BodyTooLarge", "UnsupportedMediaType", "RateLimited", "Internal", "Unavailable"),
	}
}

// exportedName turns "send-email" or "/mail/outbox" into "SendEmail" or "MailOutbox": a name for
// schemas and operation ids.
func exportedName(s string) string {
	var b strings.Builder
	for _, w := range strings.FieldsFunc(s, func(r rune) bool { return r == '-' || r == '/' || r == ':' || r == '_' || r == '.' }) {
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	return b.String()
}

// fixedSegments is path without its parameters: "/mail/:tenant/:id" is "/mail".
func fixedSegments(path string) string {
	var kept []string
	for _, s := range strings.Split(path, "/") {
		if !strings.HasPrefix(s, ":") {
			kept = append(kept, s)
		}
	}
	return strings.Join(kept, "/")
}
