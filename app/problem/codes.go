package problem

import "net/http"

// TypeBase prefixes every problem's type URI: TypeBase + code. The URIs identify a
// kind of error; they need not resolve.
const TypeBase = "https://jobguard.dev/problems/"

// Stable codes of the API's error kinds: a client branches on the code, never on the detail's
// text. The README's error table lists exactly these (TestREADMEErrorTableListsEveryCode).
const (
	CodeValidationFailed      = "validation_failed"
	CodeMalformedRequest      = "malformed_request"
	CodeUnauthorized          = "unauthorized"
	CodeForbiddenTenant       = "forbidden_tenant"
	CodeOperatorRequired      = "operator_required"
	CodeCrossOrigin           = "cross_origin"
	CodeNotFound              = "not_found"
	CodeMethodNotAllowed      = "method_not_allowed"
	CodeRequestTimeout        = "request_timeout"
	CodeIdempotencyInFlight   = "idempotency_key_in_flight"
	CodeJobNotFailed          = "job_not_failed"
	CodeJobEnded              = "job_ended"
	CodeJobNotBlocking        = "job_not_blocking"
	CodeWorkflowEnded         = "workflow_ended"
	CodeBulkAborted           = "bulk_aborted"
	CodeOrderConflict         = "order_conflict"
	CodeJobUnrunnable         = "job_unrunnable"
	CodeBodyTooLarge          = "body_too_large"
	CodeUnsupportedMediaType  = "unsupported_media_type"
	CodeIdempotencyKeyReused  = "idempotency_key_reused"
	CodeRateLimited           = "rate_limited"
	CodeTooManyStreams        = "too_many_streams"
	CodeHeaderTooLarge        = "header_too_large"
	CodeInternal              = "internal"
	CodeMonitoringFailed      = "monitoring_failed"
	CodeUnknownMethod         = "unknown_method"
	CodeRedisUnavailable      = "redis_unavailable"
	CodeEnqueueFailed         = "enqueue_failed"
	CodeDedupPending          = "dedup_pending"
	CodeOutcomeUnknown        = "outcome_unknown"
	CodeNotDurable            = "not_durable"
	CodeMonitoringUnavailable = "monitoring_unavailable"
	CodeMonitoringTimeout     = "monitoring_timeout"
	CodeMonitoringChange      = "monitoring_change_unknown"
	CodeNotLive               = "not_live"
	CodeNotReady              = "not_ready"
	CodeHTTPError             = "http_error"
)

// Kind is one error kind: its code, the status it is answered with, and what it means.
type Kind struct {
	Code   string
	Status int
	// Meaning says what happened, Action what a client should do.
	Meaning, Action string
}

// Type is the kind's problem type URI.
func (k Kind) Type() string { return TypeBase + k.Code }

// Kinds lists every error kind the API answers with, in the README table's order.
var Kinds = []Kind{
	{CodeValidationFailed, http.StatusBadRequest, "a field, parameter or header (named by `field`) is invalid, or a single-valued header is sent twice", "fix the request; do not retry it unchanged"},
	{CodeMalformedRequest, http.StatusBadRequest, "the request is not valid HTTP/1.1 and was not read, or its body length is ambiguous (Transfer-Encoding with Content-Length; the connection is closed)", "fix the client"},
	{CodeUnauthorized, http.StatusUnauthorized, "no valid bearer token", "send one of API_TOKENS (on /schedules, of OPERATOR_TOKENS)"},
	{CodeForbiddenTenant, http.StatusForbidden, "the tenant named by `field` is not the token's", "use that tenant's own token"},
	{CodeOperatorRequired, http.StatusForbidden, "the route is for operators and the token is a tenant's", "use a token of OPERATOR_TOKENS"},
	{CodeCrossOrigin, http.StatusForbidden, "the monitoring UI refused a change sent from another origin's page", "make changes from the UI's own pages"},
	{CodeNotFound, http.StatusNotFound, "no such job, schedule, read-model entry or route (another tenant's job too)", "do not retry"},
	{CodeMethodNotAllowed, http.StatusMethodNotAllowed, "the path exists, but not for this method; `Allow` lists its methods", "use a method of `Allow`"},
	{CodeRequestTimeout, http.StatusRequestTimeout, "the request was not received within the server's read timeout", "send it again, whole"},
	{CodeIdempotencyInFlight, http.StatusConflict, "a request with this Idempotency-Key is still being processed", "retry later with the same key to get its answer"},
	{CodeJobNotFailed, http.StatusConflict, "only a failed job can be retried", "do not retry; read the job's status"},
	{CodeJobEnded, http.StatusConflict, "the job has ended (done, failed, cancelled, revoked or expired) and cannot be cancelled", "do not retry"},
	{CodeJobNotBlocking, http.StatusConflict, "the job does not block a fair sequence", "do not retry; read the job's status"},
	{CodeWorkflowEnded, http.StatusConflict, "the workflow has ended (done, failed or cancelled) and cannot be cancelled", "do not retry"},
	{CodeBulkAborted, http.StatusFailedDependency, "an item of an atomic bulk enqueue was not created because another item was refused (in the bulk's answer only)", "fix the refused items and send the bulk again"},
	{CodeOrderConflict, http.StatusConflict, "the order named by `field` was submitted before with different content", "send it unchanged, or use a new id"},
	{CodeJobUnrunnable, http.StatusGone, "what the job needs to run again is gone", "submit a new job"},
	{CodeBodyTooLarge, http.StatusRequestEntityTooLarge, "the body is over BODY_LIMIT", "send a smaller body"},
	{CodeUnsupportedMediaType, http.StatusUnsupportedMediaType, "the body is not application/json", "send JSON with that Content-Type"},
	{CodeIdempotencyKeyReused, http.StatusUnprocessableEntity, "the Idempotency-Key was used for a different request", "use a new key"},
	{CodeRateLimited, http.StatusTooManyRequests, "the tenant's rate limit is spent", "retry after Retry-After"},
	{CodeTooManyStreams, http.StatusTooManyRequests, "the tenant (EVENT_STREAMS_PER_TENANT) or the process (EVENT_STREAMS_MAX) has as many event streams and long-polls open as it may", "close a stream, or retry after Retry-After"},
	{CodeHeaderTooLarge, http.StatusRequestHeaderFieldsTooLarge, "a header is larger than the 4 KiB read buffer", "send smaller headers"},
	{CodeInternal, http.StatusInternalServerError, "a fault of jobguard, logged under `request_id`", "report it with the request id"},
	{CodeMonitoringFailed, http.StatusInternalServerError, "the monitoring UI's call failed while Redis answers", "report it with the request id"},
	{CodeUnknownMethod, http.StatusNotImplemented, "a method this server does not implement", "use GET, POST, PUT or DELETE"},
	{CodeRedisUnavailable, http.StatusServiceUnavailable, "Redis did not answer (in time); nothing was changed", "retry after Retry-After"},
	{CodeEnqueueFailed, http.StatusServiceUnavailable, "the job could not be queued; nothing was kept", "retry after Retry-After"},
	{CodeDedupPending, http.StatusServiceUnavailable, "a duplicate of a job whose enqueue is not confirmed yet; nothing was kept", "retry after Retry-After (1 s)"},
	{CodeOutcomeUnknown, http.StatusServiceUnavailable, "Redis did not answer in time and the job may have been queued", "retry with the same Idempotency-Key to learn its outcome"},
	{CodeNotDurable, http.StatusServiceUnavailable, "durable mode: fewer than DURABLE_REPLICAS replicas held the enqueue within DURABLE_TIMEOUT; it is not accepted, though it may still run once", "retry after Retry-After, with the same Idempotency-Key"},
	{CodeMonitoringUnavailable, http.StatusServiceUnavailable, "the monitoring UI's backend (Redis) is unavailable; the change was not sent", "retry after Retry-After"},
	{CodeMonitoringTimeout, http.StatusServiceUnavailable, "the monitoring UI's call did not finish in time", "retry after Retry-After"},
	{CodeMonitoringChange, http.StatusServiceUnavailable, "a change from the monitoring UI was not answered in time and may still be applied", "reload before retrying"},
	{CodeNotLive, http.StatusServiceUnavailable, "/healthz: the worker's own loops are stuck", "restart the process"},
	{CodeNotReady, http.StatusServiceUnavailable, "/readyz: the process cannot take work now", "send traffic elsewhere until it is ready"},
	{CodeHTTPError, 0, "any other HTTP error (`status` says which)", "act on its status"},
}

// CodeForStatus is the code of an error that names none: each status here has one kind only
// where no handler chose a more specific one. 409 and 503 always name theirs, except that an
// unnamed 503 is Redis not answering (dependencyDown).
var CodeForStatus = map[int]string{
	http.StatusBadRequest:                  CodeValidationFailed,
	http.StatusUnauthorized:                CodeUnauthorized,
	http.StatusForbidden:                   CodeForbiddenTenant,
	http.StatusNotFound:                    CodeNotFound,
	http.StatusMethodNotAllowed:            CodeMethodNotAllowed,
	http.StatusRequestTimeout:              CodeRequestTimeout,
	http.StatusGone:                        CodeJobUnrunnable,
	http.StatusRequestEntityTooLarge:       CodeBodyTooLarge,
	http.StatusUnsupportedMediaType:        CodeUnsupportedMediaType,
	http.StatusUnprocessableEntity:         CodeIdempotencyKeyReused,
	http.StatusTooManyRequests:             CodeRateLimited,
	http.StatusRequestHeaderFieldsTooLarge: CodeHeaderTooLarge,
	http.StatusInternalServerError:         CodeInternal,
	http.StatusNotImplemented:              CodeUnknownMethod,
	http.StatusServiceUnavailable:          CodeRedisUnavailable,
}
