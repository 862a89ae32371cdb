package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/tasks"
	"github.com/jobguard/jobguard/web"
)

// problemCode is the kind of codes.go called code.
func problemCode(code string) (ProblemCode, bool) {
	for _, k := range ProblemCodes {
		if k.Code == code {
			return k, true
		}
	}
	return ProblemCode{}, false
}

// TestEveryErrorKindHasItsCodeAndType drives each error kind, as the place that raises it returns
// it, through errorHandler and checks the answer's status, code, type and (for 503) Retry-After;
// every kind of codes.go is driven. The end-to-end tests (decodeProblem) check the same of every
// problem they see, and the 409/503 ones their kind.
func TestEveryErrorKindHasItsCodeAndType(t *testing.T) {
	t.Parallel()
	unread := func(e error) error {
		status, reason, detail := unreadAnswer(config.Config{BodyLimit: 1 << 20}, e)
		return &HTTPError{Status: status, Code: unreadCodes[reason], Detail: detail}
	}
	cases := []struct {
		err    error
		status int
		code   string
	}{
		{BadField("sku", "sku is required"), 400, CodeValidationFailed},
		{&tasks.FieldError{Field: "sku", Detail: "is required"}, 400, CodeValidationFailed},
		{unread(errors.New("broken request line")), 400, CodeMalformedRequest},
		{&HTTPError{Status: http.StatusUnauthorized, Detail: "a valid bearer token is required", Field: "Authorization"}, 401, CodeUnauthorized},
		{&HTTPError{Status: http.StatusForbidden, Field: "tenant_id", Detail: "tenant_id is not the tenant of this token"}, 403, CodeForbiddenTenant},
		{&HTTPError{Status: http.StatusForbidden, Code: CodeOperatorRequired, Detail: "schedules are for operators"}, 403, CodeOperatorRequired},
		{fmt.Errorf("ui: %w", web.ErrCrossOrigin), 403, CodeCrossOrigin},
		{fmt.Errorf("view: %w", engine.ErrJobNotFound), 404, CodeNotFound},
		{tasks.NotFound("no stock for sku s"), 404, CodeNotFound},
		{&HTTPError{Status: http.StatusMethodNotAllowed, Code: CodeMethodNotAllowed, Detail: "DELETE is not a method of /jobs"}, 405, CodeMethodNotAllowed},
		{unread(fiber.ErrRequestTimeout), 408, CodeRequestTimeout},
		{&HTTPError{Status: http.StatusConflict, Code: CodeIdempotencyInFlight, Detail: "in flight"}, 409, CodeIdempotencyInFlight},
		{fmt.Errorf("replay: %w", engine.ErrNotFailed), 409, CodeJobNotFailed},
		{fmt.Errorf("cancel: %w", engine.ErrEnded), 409, CodeJobEnded},
		{&HTTPError{Status: http.StatusConflict, Code: CodeWorkflowEnded, Detail: "the workflow has ended"}, 409, CodeWorkflowEnded},
		{&HTTPError{Status: http.StatusFailedDependency, Code: CodeBulkAborted, Detail: "another item was refused"}, 424, CodeBulkAborted},
		{&HTTPError{Status: http.StatusConflict, Code: CodeOrderConflict, Field: "order_id", Detail: "submitted before"}, 409, CodeOrderConflict},
		{tasks.Conflict("order_id", "submitted before"), 409, CodeOrderConflict},
		{fmt.Errorf("replay: %w", engine.ErrUnrunnable), 410, CodeJobUnrunnable},
		{unread(fiber.ErrRequestEntityTooLarge), 413, CodeBodyTooLarge},
		{&HTTPError{Status: http.StatusUnsupportedMediaType, Field: "Content-Type", Detail: "not JSON"}, 415, CodeUnsupportedMediaType},
		{&HTTPError{Status: http.StatusUnprocessableEntity, Field: "Idempotency-Key", Detail: "another request"}, 422, CodeIdempotencyKeyReused},
		{&HTTPError{Status: http.StatusTooManyRequests, Detail: "rate limit"}, 429, CodeRateLimited},
		{&HTTPError{Status: http.StatusTooManyRequests, Code: CodeTooManyStreams, Detail: "streams"}, 429, CodeTooManyStreams},
		{unread(fiber.ErrRequestHeaderFieldsTooLarge), 431, CodeHeaderTooLarge},
		{errors.New("boom"), 500, CodeInternal},
		{web.ErrBackendFailed, 500, CodeMonitoringFailed},
		{unread(fiber.ErrNotImplemented), 501, CodeUnknownMethod},
		{fmt.Errorf("get: %w", context.DeadlineExceeded), 503, CodeRedisUnavailable},
		{fmt.Errorf("enqueue: %w", engine.ErrNotAccepted), 503, CodeRedisUnavailable},
		{&HTTPError{Status: http.StatusServiceUnavailable, Detail: "the Idempotency-Key could not be checked; retry later"}, 503, CodeRedisUnavailable},
		{&HTTPError{Status: http.StatusServiceUnavailable, Code: CodeEnqueueFailed, Detail: "not queued"}, 503, CodeEnqueueFailed},
		{&HTTPError{Status: http.StatusServiceUnavailable, Code: CodeDedupPending, Detail: "pending", Err: engine.ErrDedupPending}, 503, CodeDedupPending},
		{&HTTPError{Status: http.StatusServiceUnavailable, Code: CodeOutcomeUnknown, Detail: "unknown", Err: engine.ErrOutcomeUnknown}, 503, CodeOutcomeUnknown},
		{&HTTPError{Status: http.StatusServiceUnavailable, Code: CodeNotDurable, Detail: "not durable", Err: engine.ErrNotDurable}, 503, CodeNotDurable},
		{web.ErrBackendDown, 503, CodeMonitoringUnavailable},
		{web.ErrBackendTimeout, 503, CodeMonitoringTimeout},
		{web.ErrChangeUnknown, 503, CodeMonitoringChange},
		{&HTTPError{Status: http.StatusServiceUnavailable, Code: CodeNotLive, Detail: "worker: rescuer stale"}, 503, CodeNotLive},
		{&HTTPError{Status: http.StatusServiceUnavailable, Code: CodeNotReady, Detail: "redis: down"}, 503, CodeNotReady},
		{fiber.NewError(http.StatusTeapot, "short and stout"), 418, CodeHTTPError},
	}
	f := fiber.New(fiber.Config{ErrorHandler: errorHandler(zerolog.Nop())})
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
		var p Problem
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatalf("%v: %v %s", tc.err, err, body)
		}
		if resp.StatusCode != tc.status || p.Status != tc.status || p.Code != tc.code || p.Type != ProblemTypeBase+tc.code || p.Title == "" {
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
	for _, k := range ProblemCodes {
		if !seen[k.Code] {
			t.Errorf("kind %s is not driven by this test", k.Code)
		}
	}
}

// TestProblemCodesAreOneList: every code is listed once, snake_case, and every code the error
// handler's maps give is listed.
func TestProblemCodesAreOneList(t *testing.T) {
	t.Parallel()
	listed := map[string]bool{}
	for _, k := range ProblemCodes {
		if listed[k.Code] || k.Meaning == "" || k.Action == "" || strings.Trim(k.Code, "abcdefghijklmnopqrstuvwxyz_") != "" {
			t.Errorf("kind %+v: duplicate, not snake_case or without meaning and action", k)
		}
		listed[k.Code] = true
	}
	var mapped []string
	for _, c := range codeForStatus {
		mapped = append(mapped, c)
	}
	for _, c := range webCodes {
		mapped = append(mapped, c)
	}
	for _, c := range unreadCodes {
		mapped = append(mapped, c)
	}
	for _, c := range mapped {
		if !listed[c] {
			t.Errorf("code %q is mapped but not in ProblemCodes", c)
		}
	}
}

// TestREADMEErrorTableListsEveryCode parses the error table of docs/HTTP_API.md (code, status, type, meaning,
// what a client should do) and checks that it lists exactly ProblemCodes, in order, with their
// status and type.
func TestREADMEErrorTableListsEveryCode(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../docs/HTTP_API.md")
	if err != nil {
		t.Fatal(err)
	}
	const header = "| code | status | type | meaning | what a client should do |"
	lines := strings.Split(string(readme), "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == header {
			start = i + 2 // past the |---| line
			break
		}
	}
	if start < 0 {
		t.Fatalf("README has no error table headed %q", header)
	}
	var rows [][]string
	for _, l := range lines[start:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(l), "|"), "|")
		for i := range cells {
			cells[i] = strings.Trim(strings.TrimSpace(cells[i]), "`")
		}
		if len(cells) != 5 {
			t.Fatalf("README error table row %q has %d cells, want 5", l, len(cells))
		}
		rows = append(rows, cells)
	}
	if len(rows) != len(ProblemCodes) {
		t.Errorf("README error table has %d rows, codes.go %d kinds", len(rows), len(ProblemCodes))
	}
	for i := 0; i < min(len(rows), len(ProblemCodes)); i++ {
		k, row := ProblemCodes[i], rows[i]
		status := strconv.Itoa(k.Status)
		if k.Status == 0 {
			status = "any"
		}
		if row[0] != k.Code || row[1] != status || row[2] != k.Type() {
			t.Errorf("README error table row %d is %q %q %q, want %q %q %q", i+1, row[0], row[1], row[2], k.Code, status, k.Type())
		}
	}
}
