package web

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/jobguard/jobguard/internal/freetext"
)

// asynqmon's API calls Redis without a deadline and answers a Redis failure with a 500 whose
// text/plain body is the raw error. apiCalls bounds each call by the request timeout and turns
// failures into the app's errors (problem+json through its error handler).

// Errors of the UI's API calls; their details are fixed, nothing of the failure is echoed.
var (
	// ErrBackendTimeout: asynqmon's call did not finish within the request timeout.
	ErrBackendTimeout = &fiber.Error{Code: fiber.StatusServiceUnavailable,
		Message: "the monitoring backend (Redis) did not answer in time; retry later"}
	// ErrChangeUnknown: a change sent to Redis was not answered in time; a stalled Redis may still
	// apply it when it runs again.
	ErrChangeUnknown = &fiber.Error{Code: fiber.StatusServiceUnavailable,
		Message: "the monitoring backend (Redis) did not answer in time; the change may still be applied when it recovers, reload before retrying"}
	// ErrBackendDown: asynqmon's call failed and Redis does not answer.
	ErrBackendDown = &fiber.Error{Code: fiber.StatusServiceUnavailable,
		Message: "the monitoring backend (Redis) is unavailable; retry later"}
	// ErrBackendFailed: asynqmon's call failed while Redis answers.
	ErrBackendFailed = &fiber.Error{Code: fiber.StatusInternalServerError,
		Message: "the monitoring UI could not complete the call"}
)

// maxUpstreamText bounds what of asynqmon's own error text a log line quotes.
const maxUpstreamText = 200

// notFoundText answers a call naming a queue or task that does not exist, in asynqmon's own way
// (plain text, as its 404s are): its page shows an error's text as it comes, and one parsed from
// JSON into an object would not render.
const notFoundText = "no such queue or task"

// pingTimeout bounds the check that tells a Redis outage from another failure.
const pingTimeout = 500 * time.Millisecond

// apiCalls runs h for requests under prefix in a goroutine of its own, on a copy of the request
// (fasthttp reuses the original's buffers once the handler returns, and the goroutine may outlive
// it), and waits for it at most timeout. A change is sent only after Redis answered a ping. Other
// paths (the UI's static files) go to ui directly.
func apiCalls(h http.Handler, ui fiber.Handler, prefix string, timeout time.Duration, ping func(context.Context) error) fiber.Handler {
	return func(c *fiber.Ctx) error {
		if !strings.HasPrefix(c.Path(), prefix) {
			// The UI's files and its client-side pages: asynqmon serves them to any method.
			if c.Method() != fiber.MethodGet && c.Method() != fiber.MethodHead {
				return methodNotAllowed(c, allowRead)
			}
			return ui(c)
		}
		change := c.Method() != fiber.MethodGet && c.Method() != fiber.MethodHead
		if change {
			// A change is sent only to a Redis that answers now: one queued in a stalled Redis's
			// buffers would be applied after the UI was told it failed.
			ctx, cancel := context.WithTimeout(c.UserContext(), min(pingTimeout, timeout))
			err := ping(ctx)
			cancel()
			if err != nil {
				return ErrBackendDown
			}
		}
		req, err := copyRequest(c)
		if err != nil {
			return fiber.ErrBadRequest
		}
		rec := &recorder{header: http.Header{}}
		done := make(chan struct{})
		go func() {
			defer close(done)
			h.ServeHTTP(rec, req)
		}()
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			if change {
				return ErrChangeUnknown
			}
			return ErrBackendTimeout
		}
		if rec.status() >= 500 {
			return upstreamError(c, rec, ping)
		}
		for k, vs := range rec.header {
			for _, v := range vs {
				c.Response().Header.Add(k, v)
			}
		}
		return c.Status(rec.status()).Send(rec.body.Bytes())
	}
}

// upstreamError is the answer to asynqmon's 5xx rec (a plain-text body, the raw error): a 404 for
// a queue or task that does not exist (asynqmon answers some with a 500 whose text says
// NOT_FOUND), 503 when Redis does not answer, and otherwise ErrBackendFailed, whose log line
// quotes asynqmon's text (the answer's detail stays fixed).
func upstreamError(c *fiber.Ctx, rec *recorder, ping func(context.Context) error) error {
	text := upstreamText(rec.body.Bytes())
	if strings.HasPrefix(text, "NOT_FOUND") {
		c.Set(fiber.HeaderContentType, fiber.MIMETextPlainCharsetUTF8)
		return c.Status(fiber.StatusNotFound).SendString(notFoundText)
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), pingTimeout)
	defer cancel()
	if ping(ctx) != nil {
		return ErrBackendDown
	}
	return fmt.Errorf("%w: asynqmon answered %d: %s", ErrBackendFailed, rec.status(), text)
}

// upstreamText is the first line of asynqmon's error body, escaped and cut to maxUpstreamText.
func upstreamText(body []byte) string {
	line, _, _ := strings.Cut(string(body), "\n")
	line = freetext.Escape(strings.TrimSpace(line))
	if len(line) > maxUpstreamText {
		line = strings.ToValidUTF8(line[:maxUpstreamText], "") + "..."
	}
	return line
}

// copyRequest builds a net/http request that shares no memory with c.
func copyRequest(c *fiber.Ctx) (*http.Request, error) {
	req, err := http.NewRequest(strings.Clone(c.Method()), strings.Clone(c.OriginalURL()), bytes.NewReader(bytes.Clone(c.Body())))
	if err != nil {
		return nil, err
	}
	c.Request().Header.VisitAll(func(k, v []byte) { req.Header.Add(string(k), string(v)) })
	req.Host = string(c.Request().Host())
	req.RemoteAddr = c.Context().RemoteAddr().String()
	req.RequestURI = req.URL.RequestURI()
	return req, nil
}

// recorder is a net/http response kept in memory until the caller copies it.
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}

func (r *recorder) status() int {
	if r.code == 0 {
		return http.StatusOK
	}
	return r.code
}
