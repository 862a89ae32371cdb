package httpapi

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/app/problem"
)

// routeUnparsed is the route label and log value of requests no route ever saw: fasthttp could
// not read them (malformed, header or body too large, too slow) or Fiber does not route their
// method.
const routeUnparsed = "unparsed"

// unreadRequests wraps the error handler for requests that never reached the middleware: fasthttp
// calls Fiber's server error handler with its parser's message, which quotes the raw request
// headers (Authorization included). Such a request is answered with a fixed detail for its
// status, gets a request id (X-Request-ID too), one access-log line and its metric.
func unreadRequests(cfg config.Config, log zerolog.Logger, hm *httpMetrics, next fiber.ErrorHandler) fiber.ErrorHandler {
	return func(c *fiber.Ctx, err error) error {
		if c.Locals(localAccessLogged) != nil {
			return next(c, err)
		}
		status, reason, detail := unreadAnswer(cfg, err)
		id := utils.UUIDv4()
		c.Locals("requestid", id)
		c.Set(fiber.HeaderXRequestID, id)
		// Nothing of err goes on: its message holds the request's bytes.
		herr := next(c, &problem.HTTPError{Status: status, Code: unreadCodes[reason], Detail: detail})
		hm.observeUnparsed(c, status)
		// fasthttp stamps a request's start only once it is read: its duration is not known.
		logAccess(log, c, 0).Str("route", routeUnparsed).Str("reason", reason).Msg("request not read")
		return herr
	}
}

// unreadCodes is the problem code of each reason a request was not read.
var unreadCodes = map[string]string{
	"malformed": problem.CodeMalformedRequest, "header_too_large": problem.CodeHeaderTooLarge, "body_too_large": problem.CodeBodyTooLarge,
	"timeout": problem.CodeRequestTimeout, "unknown_method": problem.CodeUnknownMethod,
}

// unreadAnswer is the status, log reason and fixed detail of an error Fiber's server error handler
// passes on (it has already mapped fasthttp's errors to fiber.Errors).
func unreadAnswer(cfg config.Config, err error) (int, string, string) {
	code := http.StatusBadRequest
	var fe *fiber.Error
	if errors.As(err, &fe) {
		code = fe.Code
	}
	switch code {
	case http.StatusRequestHeaderFieldsTooLarge:
		return code, "header_too_large", "the request header is larger than this server reads"
	case http.StatusRequestEntityTooLarge:
		return code, "body_too_large", fmt.Sprintf("the request body is larger than the %d bytes this server accepts (BODY_LIMIT)", cfg.BodyLimit)
	case http.StatusRequestTimeout:
		return code, "timeout", "the request was not received within the server's read timeout"
	case http.StatusNotImplemented:
		return code, "unknown_method", "the request method is not one this server implements"
	}
	return http.StatusBadRequest, "malformed", "the request is not valid HTTP/1.1 and was not read"
}

// unknownMethods answers a request whose method Fiber does not route through the error handler
// like any request that was not read, instead of Fiber's plain-text 400 that skips the
// middleware (no request id, no log line, no metric). RFC 9110 section 9.1: an unknown method is
// a 501.
func unknownMethods(f *fiber.App) {
	srv := f.Server()
	next := srv.Handler
	srv.Handler = func(fctx *fasthttp.RequestCtx) {
		if methodLabel(utils.UnsafeString(fctx.Method())) != methodOther {
			next(fctx)
			return
		}
		c := f.AcquireCtx(fctx)
		defer f.ReleaseCtx(c)
		if err := f.ErrorHandler(c, fiber.ErrNotImplemented); err != nil {
			_ = c.SendStatus(fiber.StatusInternalServerError)
		}
	}
}
