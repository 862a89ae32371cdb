package web

import (
	"net/http"

	"github.com/gofiber/fiber/v2"
)

// ErrCrossOrigin is the answer to a change (any method but GET, HEAD and OPTIONS) that a browser
// sent from a page of another origin. Its detail is fixed: nothing of the request is echoed.
var ErrCrossOrigin = &fiber.Error{
	Code:    fiber.StatusForbidden,
	Message: "cross-origin request refused: the monitoring UI accepts changes only from its own pages",
}

// sameOrigin refuses cross-origin changes with the standard library's rules
// (net/http.CrossOriginProtection): Sec-Fetch-Site same-origin or none passes, any other value is
// refused; without it, an Origin must name the request's own host. A request with neither header
// is not from a browser (browsers send Origin on every cross-origin POST), so it carries no
// ambient credentials to abuse and passes; basic auth still applies to it.
//
// The check runs as a Fiber handler on a header-only copy of the request, so a refusal is an error
// for the app's error handler (problem+json, request id, access log) rather than an answer
// written inside asynqmon's net/http world.
func sameOrigin() fiber.Handler {
	cop := http.NewCrossOriginProtection()
	return func(c *fiber.Ctx) error {
		switch c.Method() {
		case fiber.MethodGet, fiber.MethodHead, fiber.MethodOptions:
			return c.Next()
		}
		// Only the fields Check reads; the values live no longer than this call.
		req := http.Request{Method: c.Method(), Host: string(c.Request().Host()), Header: http.Header{}}
		if v := c.Get("Sec-Fetch-Site"); v != "" {
			req.Header.Set("Sec-Fetch-Site", v)
		}
		if v := c.Get(fiber.HeaderOrigin); v != "" {
			req.Header.Set(fiber.HeaderOrigin, v)
		}
		if cop.Check(&req) != nil {
			return ErrCrossOrigin
		}
		return c.Next()
	}
}
