package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// pollWait is the long-poll each request of show --wait asks for: under the API's 30 s cap and
// the client's own requestTimeout (30 s), which bounds the wait and the answer together.
const pollWait = 25 * time.Second

// minWait is the shortest wait the API takes (1 ms); less left of --timeout ends the wait.
const minWait = time.Millisecond

// endedStatuses are the statuses a job ends in (until a replay or a retry), as the API's
// GET /jobs/{id}?wait= knows them (docs/HTTP_API.md, "Job statuses").
var endedStatuses = map[string]bool{"done": true, "failed": true, "cancelled": true, "expired": true,
	"revoked": true, "skipped": true}

// showWait is jobguard jobs show --wait ID: long-polls GET /jobs/{id}?wait= until the job has
// ended or --timeout is over, prints the last view, and returns an *outcomeError unless the job
// ended done. Each request after the first names the status already seen, so a change between
// two requests answers at once instead of being missed.
func (cmd *command) showWait(ctx context.Context, c *client) error {
	var deadline time.Time
	if cmd.timeout > 0 {
		deadline = time.Now().Add(cmd.timeout)
	}
	seen := "" // the first request: an ended job answers at once, another waits for a change
	for {
		wait := pollWait
		if !deadline.IsZero() {
			wait = min(wait, time.Until(deadline))
		}
		q := url.Values{}
		if wait >= minWait {
			q.Set("wait", wait.String())
		}
		if seen != "" && q.Has("wait") {
			q.Set("status", seen)
		}
		var v jobView
		raw, err := c.call(ctx, http.MethodGet, jobPath(cmd.id, ""), q, nil, &v)
		if err != nil {
			return err
		}
		seen = v.Status
		if endedStatuses[v.Status] || !q.Has("wait") {
			if err := cmd.printView(v, raw); err != nil {
				return err
			}
			return outcomeOf(v)
		}
	}
}

// outcomeError is show --wait's outcome when it is not done: the job ended otherwise, or
// --timeout was over first.
type outcomeError struct {
	jobID, status string
	timedOut      bool
}

// outcomeOf is nil for a job that ended done, else its outcomeError; a job that has not ended is
// one --timeout was over for (showWait asks for a view without a wait only then).
func outcomeOf(v jobView) error {
	if v.Status == "done" {
		return nil
	}
	return &outcomeError{jobID: v.JobID, status: v.Status, timedOut: !endedStatuses[v.Status]}
}

func (e *outcomeError) Error() string {
	if e.timedOut {
		return fmt.Sprintf("job %s has not ended within --timeout (status %s)", shown(e.jobID), shown(e.status))
	}
	return fmt.Sprintf("job %s ended %s", shown(e.jobID), shown(e.status))
}

// exitCode is ExitFailed for a failed job, ExitTimedOut when --timeout was over first, and
// ExitEndedOtherwise for any other end (cancelled, expired, revoked, skipped).
func (e *outcomeError) exitCode() int {
	switch {
	case e.timedOut:
		return ExitTimedOut
	case e.status == "failed":
		return ExitFailed
	}
	return ExitEndedOtherwise
}
