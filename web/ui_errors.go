package web

import (
	"strings"

	"github.com/gofiber/fiber/v2"
)

// asynqmon's page shows an API call's error by rendering the answer's body as it comes
// (toErrorString in its ui/src/utils.ts returns response.data). A problem+json body is parsed by
// its HTTP client into an object, which the page cannot render: a Redis outage blanked the whole
// page instead of saying so. So the UI's API calls that say they take text (its client sends
// "Accept: application/json, text/plain, */*") are marked for the app's error handler, which
// answers them in text: the problem's detail, with the same status and Retry-After. A client that
// names application/problem+json, or no type (curl, scripts), gets the problem document.

// PlainErrors is the fiber.Ctx Locals key (value true) by which web asks the app's error handler
// to answer a request's error in text/plain.
const PlainErrors = "jobguard.plain-errors"

// textErrors marks the requests under prefix that take text (takesText) before next runs.
func textErrors(next fiber.Handler, prefix string) fiber.Handler {
	return func(c *fiber.Ctx) error {
		if strings.HasPrefix(c.Path(), prefix) && takesText(c) {
			c.Locals(PlainErrors, true)
		}
		return next(c)
	}
}

// takesText reports whether the request's Accept names text/plain and not
// application/problem+json.
func takesText(c *fiber.Ctx) bool {
	accept := c.Get(fiber.HeaderAccept)
	return strings.Contains(accept, "text/plain") && !strings.Contains(accept, "application/problem+json")
}
