package web

import (
	"context"
	"time"

	"github.com/gofiber/fiber/v2"
)

// Bulk actions of the jobs page: cancel or retry every job of the page's search (all its pages,
// not only the one shown), after a confirmation page, at most BulkCap jobs a run. GET
// {root}/jobs/bulk?op=cancel|retry&<search> is the confirmation (what matches, what the action
// would reach); its form POSTs the same URL, behind the same protections as a job's own cancel
// (basic auth, the origin check, read-only), and the answer says how many were acted on and how
// many were skipped (ended, not failed, or changed in between).

// BulkCap is the most jobs one bulk action acts on; the rest wait for another run.
const BulkCap = 1000

// bulkPages bounds the entries one bulk action (or its confirmation) reads, pages of maxPageRows.
const bulkPages = 50

// bulkTimeout bounds a bulk action as a whole; each call in it still has the UI's timeout.
const bulkTimeout = 60 * time.Second

// bulkResult is what a bulk action did, or on the confirmation page would do.
type bulkResult struct {
	// Matched jobs of the search that were read; Eligible of them the op applies to (not ended for
	// a cancel, failed for a retry); Acted and Skipped what the run did (Skipped: matched and not
	// eligible, or refused when acted on: ended or replayed in between).
	Matched, Eligible, Acted, Skipped int
	// Capped: the run stopped at BulkCap; Partial: at the read bound (more may match). Either way
	// another run goes on.
	Capped, Partial bool
}

// eligible says whether op applies to a listed job.
func eligible(op string, j JobRow) bool {
	if op == "cancel" {
		return !j.Ended
	}
	return j.Failed
}

// bulk serves {root}/jobs/bulk.
func (p *pages) bulk(c *fiber.Ctx) error {
	op := c.Query("op")
	if op != "cancel" && op != "retry" {
		return badSearch("op", "must be cancel or retry")
	}
	s, err := searchOf(c, time.Now())
	if err != nil {
		return err
	}
	s.Q.Cursor = ""
	data := map[string]any{"Root": p.root, "Op": op, "Search": s, "Filter": s.values().Encode(), "Back": p.root + "/jobs?" + s.values().Encode(),
		"Action": p.root + "/jobs/bulk?" + s.with("op", op), "Cap": BulkCap}
	switch c.Method() {
	case fiber.MethodGet, fiber.MethodHead:
		if p.readOnly {
			return ErrReadOnly
		}
		ctx, cancel := context.WithTimeout(c.UserContext(), bulkTimeout)
		defer cancel()
		res, err := p.runBulk(ctx, op, s.Q, false)
		if err != nil {
			return err
		}
		data["Result"] = res
		return render(c, fiber.StatusOK, "bulk.html", data)
	case fiber.MethodPost:
		if p.readOnly {
			return ErrReadOnly
		}
		if c.FormValue("confirm") != "yes" {
			return badSearch("confirm", "a bulk action needs its confirmation page's button")
		}
		ctx, cancel := context.WithTimeout(c.UserContext(), bulkTimeout)
		defer cancel()
		res, err := p.runBulk(ctx, op, s.Q, true)
		if err != nil {
			return err
		}
		data["Result"], data["Done"] = res, true
		return render(c, fiber.StatusOK, "bulk.html", data)
	}
	return fiber.ErrMethodNotAllowed
}

// runBulk walks q's jobs (all its pages, up to bulkPages) and, when act, applies op to the
// eligible ones, up to BulkCap; otherwise it counts what it would do.
func (p *pages) runBulk(ctx context.Context, op string, q JobQuery, act bool) (bulkResult, error) {
	var res bulkResult
	q.Limit = maxPageRows
	for page := 0; ; page++ {
		if page == bulkPages {
			res.Partial = true
			return res, nil
		}
		lctx, cancel := context.WithTimeout(ctx, p.timeout)
		list, err := p.jobs.List(lctx, q)
		cancel()
		if err != nil {
			return res, err
		}
		for _, j := range list.Jobs {
			if res.Eligible == BulkCap {
				res.Capped = true
				return res, nil
			}
			res.Matched++
			if !eligible(op, j) {
				res.Skipped++
				continue
			}
			res.Eligible++
			if !act {
				continue
			}
			if err := p.apply(ctx, op, j.ID); err != nil {
				if ctx.Err() != nil {
					return res, context.Cause(ctx)
				}
				res.Skipped++ // ended, or replayed, in between: the job's own answer is 409
				continue
			}
			res.Acted++
		}
		if list.Next == "" {
			return res, nil
		}
		q.Cursor = list.Next
	}
}

// apply is op on job id, with the UI's timeout.
func (p *pages) apply(ctx context.Context, op, id string) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	if op == "cancel" {
		return p.jobs.Cancel(ctx, id, "monitoring UI", "bulk cancel on the jobs page")
	}
	return p.jobs.Replay(ctx, id)
}
