package httpapi

import (
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/gofiber/fiber/v2/middleware/requestid"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/app/problem"
)

// newFiber builds an HTTP app of the process (the API's, the admin port's): errors as problem+json,
// request ids, access logs and panic recovery. Routes are added by the caller.
func newFiber(cfg config.Config, log zerolog.Logger, hm *httpMetrics) *fiber.App {
	f := fiber.New(fiber.Config{
		AppName:               "jobguard",
		BodyLimit:             cfg.BodyLimit,
		ErrorHandler:          unreadRequests(cfg, log, hm, problem.ErrorHandler(log)),
		DisableStartupMessage: true,
		ReadTimeout:           30 * time.Second,
		WriteTimeout:          30 * time.Second,
		IdleTimeout:           2 * time.Minute,
	})
	f.Use(boundRequestID)
	f.Use(requestid.New())
	f.Use(requestDeadline(cfg.RequestTimeout))
	f.Use(accessLog(log, hm))
	f.Use(serverSpans())
	f.Use(recover.New(recover.Config{
		EnableStackTrace: true,
		StackTraceHandler: func(c *fiber.Ctx, e any) {
			log.Error().Str("request_id", problem.RequestID(c)).Interface("panic", e).Msg("handler panicked")
		},
	}))
	f.Use(fieldLines) // before any handler reads a header or the body
	unknownMethods(f)
	return f
}

// accessLog writes one line per request after the error handler has set its status.
func accessLog(log zerolog.Logger, hm *httpMetrics) fiber.Handler {
	return func(c *fiber.Ctx) error {
		start := time.Now()
		c.Locals(localAccessLogged, true)
		err := c.Next()
		if err != nil {
			// Let the error handler write the answer now so the line carries the final status.
			if herr := c.App().Config().ErrorHandler(c, err); herr != nil {
				_ = c.SendStatus(fiber.StatusInternalServerError)
			}
		}
		hm.observe(c, start)
		logAccess(log, c, time.Since(start)).Msg("request")
		return nil
	}
}

// localAccessLogged marks a request that accessLog will write its line for; the error handler
// writes the line of any other (unreadRequests).
const localAccessLogged = "jobguard.access_logged"

// logAccess is the access-log line of a request whose answer is written; the caller adds its own
// fields and sends it. Logs are written synchronously, so the request's strings need no copy.
func logAccess(log zerolog.Logger, c *fiber.Ctx, took time.Duration) *zerolog.Event {
	status := c.Response().StatusCode()
	ev := log.Info()
	if status >= 500 {
		ev = log.Warn()
	}
	return ev.Str("event", "http_request").
		Str("request_id", problem.RequestID(c)).
		Str("method", methodLabel(c.Method())).
		Str("path", problem.EchoPath(c.Path())).
		Int("status", status).
		Float64("duration_ms", float64(took.Microseconds())/1000).
		Int("bytes", bodyLen(c))
}

// bodyLen is the answer's size; -1 for a body stream (server-sent events), which Body() would read
// to its end, holding the handler until the stream closes.
func bodyLen(c *fiber.Ctx) int {
	if c.Response().IsBodyStream() {
		return -1
	}
	return len(c.Response().Body())
}

// localUnmatched marks a request that no route matched (notFound answered it).
const localUnmatched = "jobguard.unmatched"

// notFound is the last handler: a request that reaches it matched no route. Fiber's Route()
// cannot tell (every Use route reports the request's method), so it marks the request for the
// route label.
func notFound(c *fiber.Ctx) error {
	c.Locals(localUnmatched, true)
	return &problem.HTTPError{Status: fiber.StatusNotFound, Detail: "no route for " + c.Method() + " " + c.Path()}
}
