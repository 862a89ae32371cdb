package httpapi

import (
	"github.com/gofiber/fiber/v2"

	"github.com/jobguard/jobguard/tasks"
)

// command serves a task's write route: the body decoded strictly into the command's request and
// validated, its tenant the token's (403), then the task's Do; its answer as JSON.
func (a *api) command(cmd tasks.Command) fiber.Handler {
	return func(c *fiber.Ctx) error {
		req, err := acceptRequest(c, cmd.Accept())
		if err != nil {
			return err
		}
		ans, err := cmd.Do(c.UserContext(), tasks.ReadDeps{Locks: a.stack.Locks(), SQL: a.sql}, req)
		if err != nil {
			return err
		}
		if ans.Location != "" {
			c.Set(fiber.HeaderLocation, ans.Location)
		}
		return c.Status(ans.Status).JSON(ans.Body)
	}
}
