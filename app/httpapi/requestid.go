package httpapi

import (
	"regexp"

	"github.com/gofiber/fiber/v2"
)

// requestIDRe is what a client's X-Request-ID may be to be adopted: it is echoed in the answer and
// written to every log line of the request, so it is short and plain.
var requestIDRe = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// boundRequestID drops a client's X-Request-ID that is not 1-128 plain characters, or is sent on
// several lines (fieldLines answers 400), so that the request id middleware makes a fresh one
// instead of echoing it.
func boundRequestID(c *fiber.Ctx) error {
	h := &c.Request().Header
	if len(h.PeekAll(fiber.HeaderXRequestID)) > 1 {
		h.Del(fiber.HeaderXRequestID)
	}
	if id := h.Peek(fiber.HeaderXRequestID); len(id) > 0 && !requestIDRe.Match(id) {
		h.Del(fiber.HeaderXRequestID)
	}
	return c.Next()
}
