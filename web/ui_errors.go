package web

import (
	"encoding/json"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// asynqmon's page shows an API call's error by rendering the answer's body as it comes
// (toErrorString in its ui/src/utils.ts returns response.data). A problem+json body is parsed by
// its HTTP client into an object, which the page cannot render: a Redis outage blanked the whole
// page instead of saying so. So the UI's API calls that say they take text (its client sends
// "Accept: application/json, text/plain, */*") get an error as text/plain: the problem's detail,
// with the same status and Retry-After. A client that names application/problem+json, or no type
// (curl, scripts, the tests), gets the problem document as everywhere else.

// textErrors answers the errors of next, for requests under prefix that take text, as text.
func textErrors(next fiber.Handler, prefix string) fiber.Handler {
	return func(c *fiber.Ctx) error {
		err := next(c)
		if err == nil || !strings.HasPrefix(c.Path(), prefix) || !takesText(c) {
			return err
		}
		// The app's handler answers it (status, log line, Retry-After, metrics); its document is
		// then rewritten as its detail.
		if herr := c.App().Config().ErrorHandler(c, err); herr != nil {
			return herr
		}
		var p struct {
			Detail    string `json:"detail"`
			Status    int    `json:"status"`
			RequestID string `json:"request_id"`
		}
		if json.Unmarshal(c.Response().Body(), &p) != nil || p.Detail == "" {
			return nil // not a problem document: left as it is
		}
		text := p.Detail
		if p.Status == fiber.StatusInternalServerError && p.RequestID != "" {
			text += " (request " + p.RequestID + ": the server log has the cause)"
		}
		c.Set(fiber.HeaderContentType, fiber.MIMETextPlainCharsetUTF8)
		return c.SendString(text)
	}
}

// takesText reports whether the request's Accept names text/plain and not
// application/problem+json.
func takesText(c *fiber.Ctx) bool {
	accept := c.Get(fiber.HeaderAccept)
	return strings.Contains(accept, "text/plain") && !strings.Contains(accept, "application/problem+json")
}
