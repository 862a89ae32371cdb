package httpapi

import (
	"errors"
	"net/http"
	"strings"

	"github.com/jobguard/jobguard/app/problem"

	"github.com/gofiber/fiber/v2"

	"github.com/jobguard/jobguard/internal/engine"
)

// The fair dispatch routes (docs/FAIRNESS.md): a type's admission layer at a glance, and the
// operator's skip of a job that blocks its sequence.

// fairTop is how many keys GET /fairness/{type} names, by backlog and by running jobs each.
const fairTop = 20

// fairKeyAnswer is one key's jobs in the admission layer.
type fairKeyAnswer struct {
	Key     string `json:"key"`
	Waiting int64  `json:"waiting" openapi:"min=0"`
	Running int64  `json:"running" openapi:"min=0"`
}

// fairnessAnswer is the body of GET /fairness/{type}.
type fairnessAnswer struct {
	Type        string `json:"type"`
	Admitted    int64  `json:"admitted" openapi:"min=0"`
	WaitingKeys int64  `json:"waiting_keys" openapi:"min=0"`
	// Capacity is the type's capacity now (its own, or the live handlers'), for an operator only.
	Capacity int64           `json:"capacity,omitempty" openapi:"min=0"`
	Keys     []fairKeyAnswer `json:"keys"`
}

// fairness serves GET /fairness/{type}: the jobs admitted and not ended, the keys with waiting jobs,
// and the top keys' counts. A tenant's token sees its own key only (the examples' key is the
// tenant), its counts standing for the totals: other tenants' load is not its business. An
// operator token (OPERATOR_TOKENS) and an open API (no API_TOKENS) see the type's totals and its
// top keys, as the monitoring side's metrics and jobs page do.
func (a *api) fairness(c *fiber.Ctx) error {
	typ := strings.Clone(c.Params("type")) // Fiber reuses the buffer
	if tenant := tenantOf(c); tenant != "" {
		return a.tenantFairness(c, typ, tenant)
	}
	counts, err := a.stack.FairCounts(c.UserContext(), typ, fairTop)
	if err != nil {
		return fairnessError(typ, err)
	}
	out := fairnessAnswer{Type: typ, Admitted: counts.Admitted, WaitingKeys: counts.WaitingKeys, Capacity: counts.Capacity,
		Keys: []fairKeyAnswer{}}
	for _, k := range counts.TopKeys {
		out.Keys = append(out.Keys, fairKeyAnswer{Key: k.Key, Waiting: k.Backlog, Running: k.Running})
	}
	return c.JSON(out)
}

// tenantFairness is GET /fairness/{type} for tenant's token: its key's counts alone.
func (a *api) tenantFairness(c *fiber.Ctx, typ, tenant string) error {
	k, err := a.stack.FairKeyCounts(c.UserContext(), typ, tenant)
	if err != nil {
		return fairnessError(typ, err)
	}
	out := fairnessAnswer{Type: typ, Admitted: k.Running, Keys: []fairKeyAnswer{}}
	if k.Backlog > 0 {
		out.WaitingKeys = 1
	}
	if k.Backlog > 0 || k.Running > 0 {
		out.Keys = append(out.Keys, fairKeyAnswer{Key: k.Key, Waiting: k.Backlog, Running: k.Running})
	}
	return c.JSON(out)
}

func fairnessError(typ string, err error) error {
	if errors.Is(err, engine.ErrUnknownType) {
		return &problem.HTTPError{Status: http.StatusNotFound, Detail: "no fairly dispatched task type " + typ}
	}
	return err
}

// skipBlocked serves POST /jobs/{id}/skip: the job, failed for good in a sequence that blocks on
// failure, stays failed and its key's next job is admitted (409 job_not_blocking otherwise).
func (a *api) skipBlocked(c *fiber.Ctx) error {
	v, err := a.load(c)
	if err != nil {
		return err
	}
	id := v.Record.JobID
	if err := a.stack.SkipBlocked(c.UserContext(), id); err != nil {
		return err
	}
	return c.JSON(skipAnswer{JobID: id, Status: "failed"}) // SkipBlocked skips failed jobs only
}

// skipAnswer is the body of POST /jobs/{id}/skip.
type skipAnswer struct {
	JobID  string `json:"job_id" openapi:"ref=JobID"`
	Status string `json:"status" openapi:"const=failed"`
}
