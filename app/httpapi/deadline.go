package httpapi

import (
	"context"
	"time"

	"github.com/gofiber/fiber/v2"
)

// requestDeadline gives every request a context that ends after timeout (REQUEST_TIMEOUT). The
// shared Redis client honours context deadlines, so a stalled Redis costs a request at most the
// timeout, and the enqueue scripts carry it into Redis so that what a stalled Redis runs after
// the request gave up writes nothing.
func requestDeadline(timeout time.Duration) fiber.Handler {
	return func(c *fiber.Ctx) error {
		ctx, cancel := context.WithTimeout(c.UserContext(), timeout)
		defer cancel()
		c.SetUserContext(ctx)
		return c.Next()
	}
}
