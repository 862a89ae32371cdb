package httpapi

import (
	"net/http"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"

	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/tasks"
)

// What the app does with the task registry (Config.Tasks) beyond POST /jobs/<type>: it reads and
// validates the settings every task declares, hands them to the handlers, and serves every task's
// read-model routes. It names no task type.

// localPathTenant is the tenant a read model's path names, for the rate limit of an open API.
const localPathTenant = "path_tenant"

// pathTenant keeps the route's tenant parameter (a copy: Fiber reuses its buffers) for the rate
// limiter, which runs before the route's handler.
func pathTenant(r tasks.Route) fiber.Handler {
	return func(c *fiber.Ctx) error {
		c.Locals(localPathTenant, utils.CopyString(c.Params(r.Tenant)))
		return c.Next()
	}
}

// readModel serves a task's route: its parameters validated by the task (400 naming the first bad
// one), the tenant parameter checked against the token's (403), then the task's Read as JSON.
func (a *api) readModel(r tasks.Route) fiber.Handler {
	names := r.ParamNames()
	return func(c *fiber.Ctx) error {
		params := make(map[string]string, len(names))
		for _, n := range names {
			v := utils.CopyString(c.Params(n))
			if err := r.Params[n](v); err != nil {
				return err
			}
			params[n] = v
		}
		if t := tenantOf(c); t != "" && t != params[r.Tenant] {
			return &problem.HTTPError{Status: http.StatusForbidden, Field: r.Tenant, Detail: r.Tenant + " is not the tenant of this token"}
		}
		body, err := r.Read(c.UserContext(), tasks.ReadDeps{Locks: a.stack.Locks(), SQL: a.sql}, params)
		if err != nil {
			return err
		}
		return c.JSON(body)
	}
}
