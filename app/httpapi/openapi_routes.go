package httpapi

import (
	"net/http"

	"github.com/jobguard/jobguard/app/admin"
	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/apidoc"
	"github.com/jobguard/jobguard/schedule"
)

// coreOperations describe the app's own routes (api.go, workflows.go, schedules.go, admin.go,
// metrics.go, openapi.go): what each takes and answers, by status. Bodies are the handlers' Go
// types (their schemas are reflected, see defineSchemas); the task types' routes describe
// themselves (taskOperations). TestOpenAPICoversEveryRoute fails when a route is not here.
func coreOperations() []apidoc.Operation {
	return []apidoc.Operation{
		{Method: http.MethodGet, Path: "/jobs", ID: "listJobs", Summary: "List a tenant's jobs, newest first",
			Description: "Pages walk the tenant's Redis index; with DATABASE_URL they continue past its end into the SQL " +
				"history of finished jobs that are older than its last entry (same order, no job twice), so a " +
				"job Redis let go is still listed. Search: `tag` (repeated) selects through the tags' indexes, " +
				"`tags_match` says any or all of them; `created_after` and `created_before` bound the index " +
				"read; `status`, `type` and `error` filter each page, so a filtered page may hold fewer than " +
				"`limit` jobs while `next_cursor` continues.",
			Tags: []string{"jobs"},
			Params: []apidoc.Param{{Name: "tenant", In: "query", Description: "Required when the API is open (no API_TOKENS); with a token, it must be the token's tenant.",
				Schema: apidoc.Schema{"type": "string"}},
				{Name: "status", In: "query",
					Schema: apidoc.Ref("JobStatus")},
				{Name: "type", In: "query", Description: "Only jobs of this task type.",
					Schema: apidoc.Schema{"type": "string"}},
				{Name: "tag", In: "query", Description: "Only jobs with this tag; repeat it for several (at most 8), matched by `tags_match`.", Explode: true,
					Schema: apidoc.Ref("Tags")},
				{Name: "tags_match", In: "query", Description: "With several `tag`s: a job with any of them (the default) or with all.",
					Schema: apidoc.Schema{"type": "string", "enum": []string{"any", "all"}, "default": "any"}},
				{Name: "error", In: "query", Description: "Only jobs whose last_error holds this text (case-insensitive).",
					Schema: apidoc.Schema{"type": "string", "maxLength": 200}},
				{Name: "created_after", In: "query", Description: "Only jobs created at or after this time (RFC 3339).",
					Schema: apidoc.Schema{"type": "string", "format": "date-time"}},
				{Name: "created_before", In: "query", Description: "Only jobs created before this time (RFC 3339).",
					Schema: apidoc.Schema{"type": "string", "format": "date-time"}},
				{Name: "cursor", In: "query", Description: "`next_cursor` of the previous page (opaque: it says which store the list continues in); one no " +
					"list handed out is 400.",
					Schema: apidoc.Schema{"type": "string"}},
				{Name: "limit", In: "query",
					Schema: apidoc.Schema{"type": "integer", "minimum": 1, "maximum": 200, "default": 50}}},
			Responses: withProblems([]apidoc.Response{
				{Status: http.StatusOK, Description: "A page of jobs.", Headers: rateHeaders, Body: listView{}},
			}, "BadRequest", "Unauthorized", "Forbidden", "RateLimited", "Internal", "Unavailable")},
		{Method: http.MethodGet, Path: "/jobs/{id}", ID: "getJob", Summary: "A job's record, lease and timeline; or a long-poll with ?wait=",
			Tags: []string{"jobs"},
			Params: []apidoc.Param{{Ref: "JobIDPath"},
				{Name: "wait", In: "query", Description: "Long-poll: answer once the status differs from `status`, or after this long (a Go duration " +
					"from 1ms to 30s). A waiting long-poll counts against the caps of event streams " +
					"(EVENT_STREAMS_PER_TENANT, EVENT_STREAMS_MAX: 429 `too_many_streams`) and ends when its client " +
					"closes the connection.",
					Schema: apidoc.Schema{"type": "string"}},
				{Name: "status", In: "query", Description: "With `wait`: the status the client knows (default: the status at the request; a job that has " +
					"ended then answers at once).", Schema: apidoc.Ref("JobStatus")}},
			Responses: withProblems([]apidoc.Response{
				{Status: http.StatusOK, Description: "The job.", Headers: rateHeaders, Body: jobView{}},
			}, tenantStream...)},
		{Method: http.MethodGet, Path: "/jobs/{id}/events", ID: "jobEvents", Summary: "The job's timeline as server-sent events",
			Tags: []string{"jobs"},
			Params: []apidoc.Param{{Ref: "JobIDPath"},
				{Name: "Last-Event-ID", In: "header", Description: "Resume after this event id: a decimal from 0 to 9223372036854775806 (anything else is 400). An " +
					"id past the job's last event resumes after its last event: an ended job's stream is then only " +
					"`event: end`.", Schema: apidoc.Schema{"type": "integer", "minimum": 0, "maximum": 9223372036854775806}}},
			Responses: withProblems([]apidoc.Response{
				{Status: http.StatusOK, Description: "`text/event-stream`: one event per timeline entry (`id` = its position, `data` = an Event, " +
					"#/components/schemas/Event, as JSON), `event: end` once the job has ended (`data` = an " +
					"EventEnd), `: ping` every 15 s; a stream lasts at most 10 minutes, and ends within about 250 " +
					"ms of its client closing the connection. The streams of one job share one poller; a tenant may " +
					"have EVENT_STREAMS_PER_TENANT streams open on one API process (default 20), the process " +
					"EVENT_STREAMS_MAX (default 1000).",
					Headers: rateHeaders, ContentType: "text/event-stream",
					Body: apidoc.Schema{"type": "string"}},
			}, tenantStream...)},
		{Method: http.MethodPost, Path: "/jobs/{id}/retry", ID: "retryJob", Summary: "Run a failed job again",
			Tags:   []string{"jobs"},
			Params: []apidoc.Param{{Ref: "JobIDPath"}},
			Responses: withProblems([]apidoc.Response{
				{Status: http.StatusAccepted, Description: "Queued again.",
					Headers: []string{"X-Request-ID", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "Location"},
					Body:    jobAnswer{}},
				{Status: http.StatusConflict, Description: "Only a failed job can be retried. Codes: `job_not_failed`.",
					Headers: rateHeaders,
					Codes:   []string{problem.CodeJobNotFailed}},
				{Status: http.StatusGone, Description: "What the job needs to run again is gone. Codes: `job_unrunnable`.",
					Headers: rateHeaders,
					Codes:   []string{problem.CodeJobUnrunnable}},
			}, tenantAction...)},
		{Method: http.MethodPost, Path: "/jobs/{id}/cancel", ID: "cancelJob", Summary: "Cancel a queued, retrying or running job",
			Tags:            []string{"jobs"},
			Params:          []apidoc.Param{{Ref: "JobIDPath"}},
			Request:         cancelRequest{},
			RequestOptional: true,
			Responses: withProblems([]apidoc.Response{
				{Status: http.StatusOK, Description: "Cancelled.", Headers: rateHeaders, Body: cancelAnswer{}},
				{Status: http.StatusConflict, Description: "The job has ended. Codes: `job_ended`.",
					Headers: rateHeaders,
					Codes:   []string{problem.CodeJobEnded}},
			}, tenantAction...)},
		{Method: http.MethodPost, Path: "/jobs/{id}/skip", ID: "skipBlockedJob", Summary: "Let a sequence blocked by this failed job go on",
			Description: "The job, failed for good in a fairly dispatched sequence that blocks on failure, stays failed; " +
				"its key's next job is admitted (docs/FAIRNESS.md).",
			Tags:   []string{"jobs"},
			Params: []apidoc.Param{{Ref: "JobIDPath"}},
			Responses: withProblems([]apidoc.Response{
				{Status: http.StatusOK, Description: "Skipped: the sequence goes on.", Headers: rateHeaders, Body: skipAnswer{}},
				{Status: http.StatusConflict, Description: "The job does not block its sequence. Codes: `job_not_blocking`.",
					Headers: rateHeaders, Codes: []string{problem.CodeJobNotBlocking}},
			}, tenantAction...)},
		{Method: http.MethodGet, Path: "/fairness/{type}", ID: "getFairness", Summary: "A fairly dispatched task type's admission layer",
			Description: "Jobs admitted into asynq and not ended, keys with waiting jobs, and the top keys by waiting and by " +
				"running jobs (at most 20 of each), over every key (an operator token of OPERATOR_TOKENS, or an open API). " +
				"A tenant's token sees its own key only: admitted and " +
				"waiting_keys are then its key's, not the type's totals.",
			Tags: []string{"jobs"},
			Params: []apidoc.Param{{Name: "type", In: "path", Description: "A task type dispatched fairly.",
				Schema: apidoc.Schema{"type": "string", "maxLength": 128}}},
			Responses: withProblems([]apidoc.Response{
				{Status: http.StatusOK, Description: "The type's admission counts.", Headers: rateHeaders, Body: fairnessAnswer{}},
			}, tenantRead...)},
		{Method: http.MethodGet, Path: "/schedules", ID: "listSchedules", Summary: "Every schedule's state and the scheduler's leader (operators)",
			Tags:     []string{"schedules"},
			Security: []string{"operatorToken", ""},
			Responses: withProblems([]apidoc.Response{
				{Status: http.StatusOK, Description: "The overview: this process's schedules and those the running workers publish in Redis (a " +
					"worker's stay listed until it stops, or LEASE_TTL after it died).", Headers: rateHeaders, Body: schedule.Overview{}},
			}, "BadRequest", "OperatorUnauthorized", "OperatorForbidden", "RateLimited", "Internal", "Unavailable")},
		{Method: http.MethodGet, Path: "/schedules/{name}/jobs", ID: "scheduleJobs", Summary: "A schedule's latest (up to 100) tick jobs, newest first (operators)",
			Tags:     []string{"schedules"},
			Security: []string{"operatorToken", ""},
			Params:   []apidoc.Param{{Ref: "ScheduleName"}},
			Responses: withProblems([]apidoc.Response{
				{Status: http.StatusOK, Description: "The jobs.", Headers: rateHeaders, Body: scheduleJobs{}},
			}, "BadRequest", "OperatorUnauthorized", "OperatorForbidden", "NotFound", "RateLimited", "Internal", "Unavailable")},
		{Method: http.MethodPost, Path: "/schedules/{name}/pause", ID: "pauseSchedule", Summary: "Pause a schedule (operators)",
			Tags:     []string{"schedules"},
			Security: []string{"operatorToken", ""},
			Params:   []apidoc.Param{{Ref: "ScheduleName"}},
			Responses: withProblems([]apidoc.Response{
				{Status: http.StatusOK, Description: "The schedule's new state.", Headers: rateHeaders, Body: schedulePaused{}},
			}, operatorAction...)},
		{Method: http.MethodPost, Path: "/schedules/{name}/resume", ID: "resumeSchedule", Summary: "Resume a schedule (operators)",
			Tags:     []string{"schedules"},
			Security: []string{"operatorToken", ""},
			Params:   []apidoc.Param{{Ref: "ScheduleName"}},
			Responses: withProblems([]apidoc.Response{
				{Status: http.StatusOK, Description: "The schedule's new state.", Headers: rateHeaders, Body: schedulePaused{}},
			}, operatorAction...)},
		{Method: http.MethodGet, Path: "/healthz", ID: "healthz", Summary: "Liveness: the process and its own loops work",
			Description: "Served on ADMIN_ADDR when it is set, else on HTTP_ADDR.",
			Tags:        []string{"admin"},
			Security:    []string{},
			Responses: withProblems([]apidoc.Response{
				{Status: http.StatusOK, Description: "Live.", Headers: []string{"X-Request-ID"}, Body: admin.Health{}},
				{Status: http.StatusServiceUnavailable, Description: "A worker's own loops are stuck. Codes: `not_live`.",
					Headers: []string{"X-Request-ID", "Retry-After"},
					Codes:   []string{problem.CodeNotLive}},
			}, "BadRequest", "NotServed", "Internal")},
		{Method: http.MethodGet, Path: "/readyz", ID: "readyz", Summary: "Readiness: Redis answers and, on a worker, its asynq server heartbeats",
			Description: "Served on ADMIN_ADDR when it is set, else on HTTP_ADDR.",
			Tags:        []string{"admin"},
			Security:    []string{},
			Responses: withProblems([]apidoc.Response{
				{Status: http.StatusOK, Description: "Ready.", Headers: []string{"X-Request-ID"}, Body: admin.Health{}},
				{Status: http.StatusServiceUnavailable, Description: "The process cannot take work now. Codes: `not_ready`.",
					Headers: []string{"X-Request-ID", "Retry-After"},
					Codes:   []string{problem.CodeNotReady}},
			}, "BadRequest", "NotServed", "Internal")},
		{Method: http.MethodGet, Path: "/metrics", ID: "metrics", Summary: "Prometheus metrics",
			Description: "On ADMIN_ADDR when it is set (no token: keep that port private); else on HTTP_ADDR, where it " +
				"needs one of API_TOKENS' tokens when they are set.",
			Tags: []string{"admin"},
			Responses: withProblems([]apidoc.Response{
				{Status: http.StatusOK, Description: "The Prometheus text exposition format (OpenMetrics when asked for with Accept).",
					Content: map[string]any{"text/plain": apidoc.Schema{"type": "string"}, "application/openmetrics-text": apidoc.Schema{"type": "string"}}},
			}, "BadRequest", "Unauthorized", "NotServed", "Internal")},
		{Method: http.MethodGet, Path: "/openapi.json", ID: "openapi", Summary: "This description",
			Tags:     []string{"meta"},
			Security: []string{},
			Responses: []apidoc.Response{
				{Status: http.StatusOK, Description: "The OpenAPI 3.1 description of the API.",
					Headers: []string{"X-Request-ID"},
					Body:    apidoc.Schema{"type": "object", "required": []string{"openapi", "paths"}}},
				{Status: http.StatusBadRequest, Ref: "BadRequest"},
				{Status: http.StatusNotFound, Ref: "NotServed"},
			}},
		{Method: http.MethodPost, Path: "/workflows", ID: "createWorkflow", Summary: "Create a workflow (a DAG of jobs)",
			Description: "Every node's job is created at once; a node is released (delivered) once all its parents have " +
				"ended as its policy requires, exactly once; a node that needed a parent which did not end done " +
				"ends skipped, transitively. Refused (400, `field` naming `nodes[i].<field>` and the detail the " +
				"node's id): duplicate or malformed ids, unknown types, invalid payloads, unknown parents, " +
				"cycles, more than 1,000 nodes.",
			Tags:      []string{"workflows"},
			Params:    []apidoc.Param{{Ref: "IdempotencyKey"}},
			Request:   workflowRequest{},
			Responses: createdAnswers("workflow", "/workflows/", workflowCreated{})},
		{Method: http.MethodGet, Path: "/workflows/{id}", ID: "getWorkflow", Summary: "A workflow and its nodes' statuses",
			Tags:   []string{"workflows"},
			Params: []apidoc.Param{{Ref: "WorkflowIDPath"}},
			Responses: withProblems([]apidoc.Response{
				{Status: http.StatusOK, Description: "The workflow.", Headers: rateHeaders, Body: workflowView{}},
			}, tenantRead...)},
		{Method: http.MethodPost, Path: "/workflows/{id}/cancel", ID: "cancelWorkflow", Summary: "Cancel a workflow: no node is released after, every node not ended is cancelled",
			Tags:   []string{"workflows"},
			Params: []apidoc.Param{{Ref: "WorkflowIDPath"}},
			Responses: withProblems([]apidoc.Response{
				{Status: http.StatusOK, Description: "Cancelled: the workflow as it is after the cancel (a cancelled workflow's cancel again too).",
					Headers: rateHeaders,
					Body:    workflowView{}},
				{Status: http.StatusConflict, Description: "The workflow has ended other than cancelled. Codes: `workflow_ended`.",
					Headers: rateHeaders,
					Codes:   []string{problem.CodeWorkflowEnded}},
			}, tenantAction...)},
		{Method: http.MethodGet, Path: "/workflows/{id}/events", ID: "workflowEvents", Summary: "The workflow's node statuses as server-sent events",
			Tags: []string{"workflows"},
			Params: []apidoc.Param{{Ref: "WorkflowIDPath"},
				{Name: "Last-Event-ID", In: "header", Description: "Resume after this event id (a decimal; anything else is 400): the node ends " +
					"numbered above it, in order, and the current status of each node not ended that is no longer as created.",
					Schema: apidoc.Schema{"type": "integer", "minimum": 0, "maximum": 9223372036854775806}}},
			Responses: withProblems([]apidoc.Response{
				{Status: http.StatusOK, Description: "`text/event-stream`: `event: node` for each node status not sent yet on this stream (the first " +
					"read sends every node's; `data` = a WorkflowNodeEvent; `id` = the number of the node's end, or of the last end sent for a " +
					"node not ended), `event: end` once the workflow has ended (`data` = a WorkflowEventEnd), `: ping` every 15 s; a stream " +
					"lasts at most 10 minutes.",
					Headers: rateHeaders, ContentType: "text/event-stream",
					Body: apidoc.Schema{"type": "string"}},
			}, tenantStream...)},
		{Method: http.MethodPost, Path: "/batches", ID: "createBatch", Summary: "Create a batch: jobs with callbacks",
			Description: "The jobs run at once; `on_success` is enqueued exactly once when every job is done (it ends " +
				"skipped otherwise), `on_complete` exactly once when every job has ended. A batch is a workflow " +
				"whose callbacks have every job as parents.",
			Tags:      []string{"workflows"},
			Params:    []apidoc.Param{{Ref: "IdempotencyKey"}},
			Request:   batchRequest{},
			Responses: createdAnswers("batch", "/batches/", batchCreated{})},
		{Method: http.MethodGet, Path: "/batches/{id}", ID: "getBatch", Summary: "A batch's progress",
			Tags:   []string{"workflows"},
			Params: []apidoc.Param{{Ref: "WorkflowIDPath"}},
			Responses: withProblems([]apidoc.Response{
				{Status: http.StatusOK, Description: "The batch.", Headers: rateHeaders, Body: batchView{}},
			}, tenantRead...)},
	}
}

// createdAnswers are the answers of a POST that creates a workflow or a batch (what) under an
// Idempotency-Key: 202 with the created thing's URL (under prefix), 409 for a request in flight
// or a node's order submitted before with other content, 503 when the creation failed or its
// outcome is unknown, and tenantCreate's shared problems.
func createdAnswers(what, prefix string, body any) []apidoc.Response {
	return withProblems([]apidoc.Response{
		{Status: http.StatusAccepted, Description: "Created: every job exists and will run or end without the caller.",
			Headers: replayedHeaders,
			OwnHeaders: map[string]apidoc.Header{"Location": {Description: "The created " + what + "'s URL.",
				Schema: apidoc.Schema{"type": "string", "pattern": "^" + prefix}}},
			Body: body},
		{Status: http.StatusConflict, Description: "A request with this Idempotency-Key is still being processed, or a node's order " +
			"was submitted before with different content (`field` names the node's `order_id`; nothing was created). " +
			"Codes: `idempotency_key_in_flight`, `order_conflict`.",
			Headers: rateHeaders, Codes: []string{problem.CodeIdempotencyInFlight, problem.CodeOrderConflict}},
		{Status: http.StatusServiceUnavailable, Description: "Redis did not answer, the " + what + " could not be created (nothing will run), or the outcome is " +
			"unknown (retry with the same Idempotency-Key). Codes: `redis_unavailable`, `enqueue_failed`, " +
			"`outcome_unknown`, `not_durable` (created, but the replicas did not acknowledge it in time: " +
			"retry with the same Idempotency-Key to get it).",
			Headers: []string{"X-Request-ID", "Retry-After"},
			Codes:   []string{problem.CodeRedisUnavailable, problem.CodeEnqueueFailed, problem.CodeOutcomeUnknown, problem.CodeNotDurable}},
	}, tenantCreate...)
}
