package httpapi

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/freetext"
)

// cancelRequest is the optional body of POST /jobs/{id}/cancel.
type cancelRequest struct {
	Reason string `json:"reason" openapi:"optional,ref=CancelReason"`
}

// maxCancelReason bounds the reason kept on the timeline and in last_error.
const maxCancelReason = 200

// checkReason is nil for a reason of at most maxCancelReason bytes of printable text on one line
// (the API's and jobguard jobs cancel --reason's rule): it is shown on terminals and pages.
func checkReason(reason string) error {
	if len(reason) > maxCancelReason {
		return fmt.Errorf("must be at most %d bytes, not %d", maxCancelReason, len(reason))
	}
	if err := freetext.Check(reason); err != nil {
		return fmt.Errorf("must be one line of printable text: %w", err)
	}
	return nil
}

// cancelAnswer is the body of a cancel's 200.
type cancelAnswer struct {
	JobID  string `json:"job_id" openapi:"ref=JobID"`
	Status string `json:"status" openapi:"const=cancelled"`
	// Was is the status the job had: queued, retrying or processing.
	Was string `json:"was" openapi:"enum=queued|retrying|processing"`
	// DeliveryDeleted says asynq no longer holds the job's delivery (otherwise it is acknowledged
	// without running when it is delivered).
	DeliveryDeleted bool `json:"delivery_deleted"`
}

// cancel is POST /jobs/{id}/cancel: the caller's tenant's job, not ended, becomes cancelled.
func (a *api) cancel(c *fiber.Ctx) error {
	var req cancelRequest
	if body := c.Body(); len(body) > 0 {
		if err := decodeJSON(body, &req); err != nil {
			return err
		}
	}
	if err := checkReason(req.Reason); err != nil {
		return &problem.HTTPError{Status: http.StatusBadRequest, Field: "reason", Detail: "reason " + err.Error(), Err: err}
	}
	v, err := a.load(c) // tenant rule: another tenant's job is 404
	if err != nil {
		return err
	}
	by := "api"
	if t := tenantOf(c); t != "" {
		by = "tenant " + t
	}
	id := v.Record.JobID
	res, err := a.stack.Cancel(c.UserContext(), id, engine.CancelRequest{By: by, Why: strings.Clone(req.Reason)})
	if err != nil {
		return err
	}
	return c.JSON(cancelAnswer{JobID: id, Status: "cancelled", Was: string(res.From), DeliveryDeleted: res.DeliveryDeleted})
}
