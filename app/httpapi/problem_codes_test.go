package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/tasks"
	"github.com/jobguard/jobguard/web"
)

// problemCode is the kind of codes.go called code.
func problemCode(code string) (problem.Kind, bool) {
	for _, k := range problem.Kinds {
		if k.Code == code {
			return k, true
		}
	}
	return problem.Kind{}, false
}

// TestEveryErrorKindHasItsCodeAndType drives each error kind, as the place that raises it returns
// it, through errorHandler and checks the answer's status, code, type and (for 503) Retry-After;
// every kind of codes.go is driven. The end-to-end tests (decodeProblem) check the same of every
// problem they see, and the 409/503 ones their kind.
func TestEveryErrorKindHasItsCodeAndType(t *testing.T) {
	t.Parallel()
	unread := func(e error) error {
		status, reason, detail := unreadAnswer(config.Config{BodyLimit: 1 << 20}, e)
		return &problem.HTTPError{Status: status, Code: unreadCodes[reason], Detail: detail}
	}
	cases := []struct {
		err    error
		status int
		code   string
	}{
		{problem.BadField("sku", "sku is required"), 400, problem.CodeValidationFailed},
		{&tasks.FieldError{Field: "sku", Detail: "is required"}, 400, problem.CodeValidationFailed},
		{unread(errors.New("broken request line")), 400, problem.CodeMalformedRequest},
		{&problem.HTTPError{Status: http.StatusUnauthorized, Detail: "a valid bearer token is required", Field: "Authorization"}, 401, problem.CodeUnauthorized},
		{&problem.HTTPError{Status: http.StatusForbidden, Field: "tenant_id", Detail: "tenant_id is not the tenant of this token"}, 403, problem.CodeForbiddenTenant},
		{&problem.HTTPError{Status: http.StatusForbidden, Code: problem.CodeOperatorRequired, Detail: "schedules are for operators"}, 403, problem.CodeOperatorRequired},
		{fmt.Errorf("ui: %w", web.ErrCrossOrigin), 403, problem.CodeCrossOrigin},
		{fmt.Errorf("view: %w", engine.ErrJobNotFound), 404, problem.CodeNotFound},
		{tasks.NotFound("no stock for sku s"), 404, problem.CodeNotFound},
		{&problem.HTTPError{Status: http.StatusMethodNotAllowed, Code: problem.CodeMethodNotAllowed, Detail: "DELETE is not a method of /jobs"}, 405, problem.CodeMethodNotAllowed},
		{unread(fiber.ErrRequestTimeout), 408, problem.CodeRequestTimeout},
		{&problem.HTTPError{Status: http.StatusConflict, Code: problem.CodeIdempotencyInFlight, Detail: "in flight"}, 409, problem.CodeIdempotencyInFlight},
		{fmt.Errorf("replay: %w", engine.ErrNotFailed), 409, problem.CodeJobNotFailed},
		{fmt.Errorf("cancel: %w", engine.ErrEnded), 409, problem.CodeJobEnded},
		{fmt.Errorf("skip: %w", engine.ErrNotBlocked), 409, problem.CodeJobNotBlocking},
		{&problem.HTTPError{Status: http.StatusConflict, Code: problem.CodeWorkflowEnded, Detail: "the workflow has ended"}, 409, problem.CodeWorkflowEnded},
		{&problem.HTTPError{Status: http.StatusFailedDependency, Code: problem.CodeBulkAborted, Detail: "another item was refused"}, 424, problem.CodeBulkAborted},
		{&problem.HTTPError{Status: http.StatusConflict, Code: problem.CodeOrderConflict, Field: "order_id", Detail: "submitted before"}, 409, problem.CodeOrderConflict},
		{tasks.Conflict("order_id", "submitted before"), 409, problem.CodeOrderConflict},
		{fmt.Errorf("replay: %w", engine.ErrUnrunnable), 410, problem.CodeJobUnrunnable},
		{unread(fiber.ErrRequestEntityTooLarge), 413, problem.CodeBodyTooLarge},
		{&problem.HTTPError{Status: http.StatusUnsupportedMediaType, Field: "Content-Type", Detail: "not JSON"}, 415, problem.CodeUnsupportedMediaType},
		{&problem.HTTPError{Status: http.StatusUnprocessableEntity, Field: "Idempotency-Key", Detail: "another request"}, 422, problem.CodeIdempotencyKeyReused},
		{&problem.HTTPError{Status: http.StatusTooManyRequests, Detail: "rate limit"}, 429, problem.CodeRateLimited},
		{&problem.HTTPError{Status: http.StatusTooManyRequests, Code: problem.CodeTooManyStreams, Detail: "streams"}, 429, problem.CodeTooManyStreams},
		{unread(fiber.ErrRequestHeaderFieldsTooLarge), 431, problem.CodeHeaderTooLarge},
		{errors.New("boom"), 500, problem.CodeInternal},
		{web.ErrBackendFailed, 500, problem.CodeMonitoringFailed},
		{unread(fiber.ErrNotImplemented), 501, problem.CodeUnknownMethod},
		{fmt.Errorf("get: %w", context.DeadlineExceeded), 503, problem.CodeRedisUnavailable},
		{fmt.Errorf("enqueue: %w", engine.ErrNotAccepted), 503, problem.CodeRedisUnavailable},
		{&problem.HTTPError{Status: http.StatusServiceUnavailable, Detail: "the Idempotency-Key could not be checked; retry later"}, 503, problem.CodeRedisUnavailable},
		{&problem.HTTPError{Status: http.StatusServiceUnavailable, Code: problem.CodeEnqueueFailed, Detail: "not queued"}, 503, problem.CodeEnqueueFailed},
		{&problem.HTTPError{Status: http.StatusServiceUnavailable, Code: problem.CodeDedupPending, Detail: "pending", Err: engine.ErrDedupPending}, 503, problem.CodeDedupPending},
		{&problem.HTTPError{Status: http.StatusServiceUnavailable, Code: problem.CodeOutcomeUnknown, Detail: "unknown", Err: engine.ErrOutcomeUnknown}, 503, problem.CodeOutcomeUnknown},
		{&problem.HTTPError{Status: http.StatusServiceUnavailable, Code: problem.CodeNotDurable, Detail: "not durable", Err: engine.ErrNotDurable}, 503, problem.CodeNotDurable},
		{web.ErrBackendDown, 503, problem.CodeMonitoringUnavailable},
		{web.ErrBackendTimeout, 503, problem.CodeMonitoringTimeout},
		{web.ErrChangeUnknown, 503, problem.CodeMonitoringChange},
		{&problem.HTTPError{Status: http.StatusServiceUnavailable, Code: problem.CodeNotLive, Detail: "worker: rescuer stale"}, 503, problem.CodeNotLive},
		{&problem.HTTPError{Status: http.StatusServiceUnavailable, Code: problem.CodeNotReady, Detail: "redis: down"}, 503, problem.CodeNotReady},
		{fiber.NewError(http.StatusTeapot, "short and stout"), 418, problem.CodeHTTPError},
	}
	f := fiber.New(fiber.Config{ErrorHandler: problem.ErrorHandler(zerolog.Nop())})
	f.Get("/kind/:i", func(c *fiber.Ctx) error {
		i, _ := strconv.Atoi(c.Params("i"))
		return cases[i].err
	})
	seen := map[string]bool{}
	for i, tc := range cases {
		resp, err := f.Test(httptest.NewRequest(http.MethodGet, "/kind/"+strconv.Itoa(i), nil), -1)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var p problem.Details
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatalf("%v: %v %s", tc.err, err, body)
		}
		if resp.StatusCode != tc.status || p.Status != tc.status || p.Code != tc.code || p.Type != problem.TypeBase+tc.code || p.Title == "" {
			t.Errorf("%v: answered %d %+v, want %d %s", tc.err, resp.StatusCode, p, tc.status, tc.code)
		}
		if k, ok := problemCode(p.Code); !ok || (k.Status != 0 && k.Status != p.Status) {
			t.Errorf("%v: code %q is not a kind of codes.go with status %d", tc.err, p.Code, p.Status)
		}
		if tc.status == 503 && resp.Header.Get(fiber.HeaderRetryAfter) == "" {
			t.Errorf("%v: 503 without Retry-After", tc.err)
		}
		seen[p.Code] = true
	}
	for _, k := range problem.Kinds {
		if !seen[k.Code] {
			t.Errorf("kind %s is not driven by this test", k.Code)
		}
	}
}

// Every code an unread request is answered with (unparsed.go) is a kind of problem.Kinds.
func TestUnreadCodesAreKinds(t *testing.T) {
	t.Parallel()
	for reason, c := range unreadCodes {
		if _, ok := problemCode(c); !ok {
			t.Errorf("unread %v: code %q is not in problem.Kinds", reason, c)
		}
	}
}
