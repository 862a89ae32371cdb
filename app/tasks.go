package app

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"

	"github.com/jobguard/jobguard/internal/redact"
	"github.com/jobguard/jobguard/tasks"
)

// What the app does with the task registry (Config.Tasks) beyond POST /jobs/<type>: it reads and
// validates the settings every task declares, hands them to the handlers, and serves every task's
// read-model routes. It names no task type.

// appPaths are the path prefixes the app serves itself; no task route may start with one.
var appPaths = []string{"/jobs", "/monitoring", "/metrics", "/healthz", "/readyz", "/schedules", "/openapi.json"}

// taskSettings reads the settings of every task in list, after the app's own variables: an unset
// or empty variable has its default. A setting that repeats a variable of the app is an error.
func (p *envParser) taskSettings(list []tasks.Task) map[string]string {
	own := slices.Clone(p.names)
	m := map[string]string{}
	for _, t := range list {
		for _, s := range t.Settings {
			if slices.Contains(own, s.Name) {
				if p.err == nil {
					p.err = fmt.Errorf("app: task %s: setting %s is a variable of the app", t.Type, s.Name)
				}
				return nil
			}
			v := s.Default
			p.str(s.Name, &v)
			m[s.Name] = v
		}
	}
	return m
}

// setting is the value of a task's setting: TaskSettings', else its default.
func (c Config) setting(s tasks.Setting) string {
	if v, ok := c.TaskSettings[s.Name]; ok {
		return v
	}
	return s.Default
}

// validateTasks checks the task list (tasks.Check, no route on the app's paths) and every task's
// settings; a bad setting is a *ConfigError naming its variable, its text redacted.
func (c Config) validateTasks() error {
	if err := tasks.Check(c.Tasks); err != nil {
		return err
	}
	for _, t := range c.Tasks {
		paths := make([]string, 0, len(t.Routes)+len(t.Commands))
		for _, r := range t.Routes {
			paths = append(paths, r.Path)
		}
		for _, c := range t.Commands {
			paths = append(paths, c.Path)
		}
		for _, path := range paths {
			for _, p := range appPaths {
				if path == p || strings.HasPrefix(path, p+"/") {
					return fmt.Errorf("app: task %s: route %s is under %s, a path of the app", t.Type, path, p)
				}
			}
		}
		for _, s := range t.Settings {
			if s.Validate == nil {
				continue
			}
			if err := s.Validate(c.setting(s)); err != nil {
				// The task's own text says what is wrong; secrets a URL in it carries are removed.
				return &ConfigError{Var: s.Name, Err: redact.Error(err)}
			}
		}
	}
	return nil
}

// taskDeps are the handlers' dependencies: every task's settings, defaults applied.
func (c Config) taskDeps() tasks.Deps {
	d := tasks.Deps{Settings: map[string]string{}}
	for _, t := range c.Tasks {
		for _, s := range t.Settings {
			d.Settings[s.Name] = c.setting(s)
		}
	}
	return d
}

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
			return &HTTPError{Status: http.StatusForbidden, Field: r.Tenant, Detail: r.Tenant + " is not the tenant of this token"}
		}
		body, err := r.Read(c.UserContext(), tasks.ReadDeps{Locks: a.stack.Locks(), SQL: a.sql}, params)
		if err != nil {
			return err
		}
		return c.JSON(body)
	}
}
