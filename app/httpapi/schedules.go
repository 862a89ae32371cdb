package httpapi

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"

	"github.com/jobguard/jobguard/app/auth"
	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/schedule"
)

// operatorRoutes are the schedules' routes (list, latest jobs, pause, resume): operators only. With API_TOKENS or OPERATOR_TOKENS
// set they need an operator token (a tenant token is 403); with neither, the API is open.
func operatorRoutes(f *fiber.App, s *schedule.Scheduler, operators, tenants auth.Tokens, limit fiber.Handler) {
	guard := func(c *fiber.Ctx) error {
		if operators.Open() && tenants.Open() {
			return c.Next()
		}
		token, ok := auth.BearerToken(c.Get(fiber.HeaderAuthorization))
		if _, op := operators.Tenant(token); ok && op {
			return c.Next()
		}
		if _, tenant := tenants.Tenant(token); ok && tenant {
			return &problem.HTTPError{Status: http.StatusForbidden, Code: problem.CodeOperatorRequired, Field: "Authorization", Detail: "schedules are for operators: this route needs a token of OPERATOR_TOKENS"}
		}
		c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="jobguard"`)
		return &problem.HTTPError{Status: http.StatusUnauthorized, Detail: "a valid operator bearer token is required", Field: "Authorization"}
	}
	f.Get("/schedules", guard, limit, func(c *fiber.Ctx) error {
		ov, err := s.Overview(c.UserContext())
		if err != nil {
			return err
		}
		return c.JSON(ov)
	})
	f.Get("/schedules/:name/jobs", guard, limit, func(c *fiber.Ctx) error {
		name := utils.CopyString(c.Params("name"))
		jobs, err := s.Jobs(c.UserContext(), name)
		if errors.Is(err, schedule.ErrUnknown) {
			return &problem.HTTPError{Status: http.StatusNotFound, Field: "name", Detail: "no schedule is called " + fmt.Sprintf("%q", name)}
		}
		if err != nil {
			return err
		}
		return c.JSON(scheduleJobs{Name: name, Jobs: jobs})
	})
	pause := func(paused bool) fiber.Handler {
		return func(c *fiber.Ctx) error {
			name := utils.CopyString(c.Params("name"))
			err := s.SetPaused(c.UserContext(), name, paused)
			if errors.Is(err, schedule.ErrUnknown) {
				return &problem.HTTPError{Status: http.StatusNotFound, Field: "name", Detail: "no schedule is called " + fmt.Sprintf("%q", name)}
			}
			if err != nil {
				return err
			}
			return c.JSON(schedulePaused{Name: name, Paused: paused})
		}
	}
	f.Post("/schedules/:name/pause", guard, limit, pause(true))
	f.Post("/schedules/:name/resume", guard, limit, pause(false))
}

// scheduleJobs is GET /schedules/{name}/jobs: the schedule's latest tick jobs.
type scheduleJobs struct {
	Name string             `json:"name"`
	Jobs []schedule.TickJob `json:"jobs" openapi:"nullable"`
}

// schedulePaused is the answer of a pause or resume: the schedule's new state.
type schedulePaused struct {
	Name   string `json:"name"`
	Paused bool   `json:"paused"`
}
