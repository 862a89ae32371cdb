package app

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/gofiber/fiber/v2/middleware/requestid"
	"github.com/rs/zerolog"
)

// readyTimeout bounds the Redis round trip behind /readyz.
const readyTimeout = time.Second

// newFiber builds the HTTP app every role serves: health, readiness, errors as problem+json,
// request ids, access logs and panic recovery. Routes of the API and UI are added by the caller.
func newFiber(cfg Config, log zerolog.Logger, hm *httpMetrics) *fiber.App {
	f := fiber.New(fiber.Config{
		AppName:               "jobguard",
		BodyLimit:             cfg.BodyLimit,
		ErrorHandler:          errorHandler(log),
		DisableStartupMessage: true,
		ReadTimeout:           30 * time.Second,
		WriteTimeout:          30 * time.Second,
		IdleTimeout:           2 * time.Minute,
	})
	f.Use(requestid.New())
	f.Use(requestDeadline(cfg.RequestTimeout))
	f.Use(accessLog(log, hm))
	f.Use(serverSpans())
	f.Use(recover.New(recover.Config{
		EnableStackTrace: true,
		StackTraceHandler: func(c *fiber.Ctx, e any) {
			log.Error().Str("request_id", requestID(c)).Interface("panic", e).Msg("handler panicked")
		},
	}))
	return f
}

// accessLog writes one line per request after the error handler has set its status.
func accessLog(log zerolog.Logger, hm *httpMetrics) fiber.Handler {
	return func(c *fiber.Ctx) error {
		start := time.Now()
		err := c.Next()
		if err != nil {
			// Let the error handler write the answer now so the line carries the final status.
			if herr := c.App().Config().ErrorHandler(c, err); herr != nil {
				_ = c.SendStatus(fiber.StatusInternalServerError)
			}
		}
		status := c.Response().StatusCode()
		hm.observe(c, start)
		ev := log.Info()
		if status >= 500 {
			ev = log.Warn()
		}
		ev.Str("event", "http_request").
			Str("request_id", requestID(c)).
			Str("method", c.Method()).
			Str("path", c.Path()).
			Int("status", status).
			Float64("duration_ms", float64(time.Since(start).Microseconds())/1000).
			Int("bytes", len(c.Response().Body())).
			Msg("request")
		return nil
	}
}

// healthRoutes adds /healthz (the process answers) and /readyz (Redis answers in time).
func healthRoutes(f *fiber.App, ping func(context.Context) error) {
	f.Get("/healthz", func(c *fiber.Ctx) error {
		return c.JSON(fiber.Map{"status": "ok"})
	})
	f.Get("/readyz", func(c *fiber.Ctx) error {
		ctx, cancel := context.WithTimeout(c.UserContext(), readyTimeout)
		defer cancel()
		if err := ping(ctx); err != nil {
			detail := "redis: " + err.Error()
			if errors.Is(err, context.DeadlineExceeded) {
				detail = "redis did not answer within " + readyTimeout.String()
			}
			return &HTTPError{Status: http.StatusServiceUnavailable, Detail: detail, Err: err}
		}
		return c.JSON(fiber.Map{"status": "ready"})
	})
}
