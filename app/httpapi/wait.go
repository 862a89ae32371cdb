package httpapi

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// maxWait bounds GET /jobs/{id}?wait=; the HTTP server's write timeout (30 s) is the hard limit.
const maxWait = 30 * time.Second

// statusClientClosed is the status a long-poll whose client left is logged with (nginx's 499).
const statusClientClosed = 499

// waitPoll is how often a long-poll reads the job's status (one HGET).
const waitPoll = 200 * time.Millisecond

// viewOrWait is GET /jobs/{id}: the job view, at once, or with ?wait=<duration> (at most 30s) once
// its status differs from ?status= (default: the status when the request came) or the wait is over,
// whichever is first. A job that has ended answers at once when no status is given.
//
// Its own deadline: every request's context ends after REQUEST_TIMEOUT (requestDeadline), which a
// long-poll outlives by design. The wait runs on the request's context without its deadline
// (context.WithoutCancel keeps its values: request id, trace), bounded by the wait; each status read,
// and the final view, gets a fresh REQUEST_TIMEOUT of its own.
func (a *api) viewOrWait(c *fiber.Ctx) error {
	w := c.Query("wait")
	if w == "" {
		return a.view(c)
	}
	wait, err := time.ParseDuration(w)
	if err != nil || wait <= 0 || wait > maxWait {
		return &problem.HTTPError{Status: http.StatusBadRequest, Field: "wait", Detail: "wait must be a duration from 1ms to 30s, e.g. 30s"}
	}
	known := jobstore.Status(c.Query("status"))
	if known != "" && !slices.Contains(jobstore.Statuses, known) {
		return &problem.HTTPError{Status: http.StatusBadRequest, Field: "status", Detail: "status must be a job status"}
	}
	timeout := time.Second * 5
	if d, ok := c.UserContext().Deadline(); ok {
		timeout = time.Until(d) // what requestDeadline left: REQUEST_TIMEOUT, less the time so far
	}
	v, err := a.load(c) // tenant rule first: another tenant's job is 404 at once
	if err != nil {
		return err
	}
	if known == "" {
		if v.Record.Status.Terminal() {
			return a.view(c)
		}
		known = v.Record.Status
	}
	keys, err := a.stack.Store().Keys(v.Record.JobID, "")
	if err != nil {
		return err
	}
	// A waiting long-poll holds a place as an event stream does (the same caps).
	release, err := a.admitStream(c)
	if err != nil {
		return err
	}
	defer release()
	base := context.WithoutCancel(c.UserContext())
	end := time.Now().Add(wait)
	tick := time.NewTicker(waitPoll)
	defer tick.Stop()
	for st := v.Record.Status; st == known && time.Now().Before(end); {
		<-tick.C
		if peerGone(c.Context().Conn()) {
			// Nobody reads the answer: nginx's "client closed request", for the log and metrics.
			return c.SendStatus(statusClientClosed)
		}
		rctx, cancel := context.WithTimeout(base, timeout)
		st, err = a.stack.Store().Status(rctx, keys)
		cancel()
		if err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(base, timeout)
	defer cancel()
	c.SetUserContext(ctx)
	return a.view(c)
}
