package cli

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"

	"github.com/jobguard/jobguard/internal/freetext"
	"github.com/jobguard/jobguard/internal/redact"
)

// problemType is the media type of the API's error answers (RFC 9457).
const problemType = "application/problem+json"

// problem is the part of an error answer the CLI prints and branches on.
type problem struct {
	Code      string `json:"code"`
	Title     string `json:"title"`
	Detail    string `json:"detail"`
	Field     string `json:"field"`
	RequestID string `json:"request_id"`
}

// apiError is an answer outside 2xx: its status, its problem when it is one, and its Retry-After.
type apiError struct {
	Status     int
	StatusText string // resp.Status, for an answer that is not a problem
	Problem    problem
	IsProblem  bool
	RetryAfter string
}

func newAPIError(resp *http.Response, raw []byte) *apiError {
	e := &apiError{Status: resp.StatusCode, StatusText: resp.Status, RetryAfter: resp.Header.Get("Retry-After")}
	if isJSON(resp.Header.Get("Content-Type")) && json.Unmarshal(raw, &e.Problem) == nil && e.Problem.Title != "" {
		e.IsProblem = true
	}
	return e
}

// Error is one line: the problem's title and detail (both the server's words, escaped: a detail
// may repeat a request's text), and when to retry.
func (e *apiError) Error() string {
	var b strings.Builder
	if e.IsProblem {
		b.WriteString(freetext.Escape(e.Problem.Title))
		if e.Problem.Detail != "" {
			b.WriteString(": ")
			b.WriteString(freetext.Escape(e.Problem.Detail))
		}
	} else {
		b.WriteString(freetext.Escape(e.StatusText))
		if e.Status >= 300 && e.Status < 400 {
			b.WriteString(" (a redirect, not followed: is --url the API's address?)")
		} else {
			b.WriteString(" (not a jobguard problem answer: is --url the API's address?)")
		}
	}
	switch {
	case e.Status == http.StatusServiceUnavailable && e.RetryAfter != "":
		b.WriteString(" (unavailable for now: retry after " + freetext.Escape(e.RetryAfter) + " s)")
	case e.Status == http.StatusTooManyRequests && e.RetryAfter != "":
		b.WriteString(" (rate limited: retry after " + freetext.Escape(e.RetryAfter) + " s)")
	case e.Status == http.StatusUnauthorized:
		b.WriteString(" (set --token or JOBGUARD_TOKEN to one of the server's API_TOKENS)")
	}
	if e.Problem.RequestID != "" {
		b.WriteString(" [request " + freetext.Escape(e.Problem.RequestID) + "]")
	}
	return b.String()
}

// exitCode is the exit code an answer means: 400 usage (the API refused the command line's
// values), 404 not found, 409 and 410 conflict (the job's state), anything else an error.
func (e *apiError) exitCode() int {
	switch e.Status {
	case http.StatusBadRequest:
		return ExitUsage
	case http.StatusNotFound:
		return ExitNotFound
	case http.StatusConflict, http.StatusGone:
		return ExitConflict
	}
	return ExitError
}

// unreachableError is a request that got no answer: nothing is known to have changed.
type unreachableError struct {
	base string // redacted
	err  error
}

// Error says why in a few words; the wrapped error is not printed whole, as a *url.Error
// repeats the URL (and would its user name).
func (e *unreachableError) Error() string {
	return "no answer from " + e.base + ": " + reason(e.err) + " (is jobguard running there? set --url or JOBGUARD_URL)"
}

func (e *unreachableError) Unwrap() error { return e.err }

func reason(err error) string {
	var dns *net.DNSError
	var op *net.OpError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, http.ErrHandlerTimeout):
		return "timed out"
	case errors.As(err, &dns):
		return "cannot resolve " + dns.Name
	case errors.As(err, &op) && op.Timeout():
		return "timed out"
	case errors.Is(err, context.Canceled):
		return "interrupted"
	}
	var to interface{ Timeout() bool }
	if errors.As(err, &to) && to.Timeout() {
		return "timed out"
	}
	if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
		// The server closed the connection before it read the request whole: it refused it
		// (a request too large, most likely) without an answer this client could read.
		return "the server closed the connection while the request was sent"
	}
	if op != nil {
		return op.Op + ": " + op.Err.Error()
	}
	var ue2 *url.Error
	if errors.As(err, &ue2) { // its Err without its URL: a TLS failure says which
		return redact.String(ue2.Err.Error())
	}
	return redact.String(err.Error())
}

// exitCode is the exit code of err (nil is 0), and the line to print for it.
func exitCode(err error) int {
	var ae *apiError
	var oe *outcomeError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ae):
		return ae.exitCode()
	case errors.As(err, &oe):
		return oe.exitCode()
	case errors.Is(err, errBadTarget):
		return ExitUsage
	}
	return ExitError
}
