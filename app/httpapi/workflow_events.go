package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
)

// workflowEvents is GET /workflows/{id}/events: server-sent events, `event: node` (data: id,
// job_id, status) for each node status the stream has not sent yet, then `event: end` with the
// workflow's status once it has ended.
//
// Ids (workflowFeed): a node's end, once told to the workflow, is numbered in the workflow's hash
// (1 for the first node to end, then 2...), and its event carries that number; an event of a
// node still running carries the number of the last end sent. Last-Event-ID: n resumes after the
// n-th end: the ends numbered above n, then the nodes that have not ended and are no longer as
// created (held with parents, queued without). The first read of a fresh stream sends every
// node's. The machinery is the jobs' stream's (events.go): the App's stream context,
// eventsMaxStream, the streams' caps per caller and in all, a fresh REQUEST_TIMEOUT per poll, the
// write deadline pushed on by each write.
func (a *api) workflowEvents(c *fiber.Ctx) error {
	from, err := lastEventID(c.Get("Last-Event-ID"))
	if err != nil {
		return err
	}
	timeout := 5 * time.Second
	if d, ok := c.UserContext().Deadline(); ok {
		timeout = time.Until(d)
	}
	v, err := a.loadWorkflow(c, "workflow")
	if err != nil {
		return err
	}
	// A workflow's stream counts against the same caps as a job's (too_many_streams).
	release, err := a.admitStream(c)
	if err != nil {
		return err
	}
	id := strings.Clone(v.ID)
	conn := c.Context().Conn()
	base := context.WithoutCancel(c.UserContext())
	c.Set(fiber.HeaderContentType, "text/event-stream")
	c.Set(fiber.HeaderCacheControl, "no-cache")
	c.Set("X-Accel-Buffering", "no")
	c.Context().Response.ImmediateHeaderFlush = true
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		defer release()
		ctx, cancel := context.WithTimeout(a.streams, eventsMaxStream)
		defer cancel()
		s := eventStream{w: w, conn: conn}
		f := newWorkflowFeed(from)
		tick := time.NewTicker(eventsPoll)
		defer tick.Stop()
		idle := time.Now()
		for {
			rctx, rcancel := context.WithTimeout(base, timeout)
			v, err := a.stack.Workflow(rctx, id)
			rcancel()
			if err != nil {
				return
			}
			if text := f.next(v); text != "" {
				if !s.write(text) {
					return
				}
				idle = time.Now()
			}
			if workflowHasEnded(v.Status) {
				data, _ := json.Marshal(workflowEventEnd{Status: v.Status})
				s.write("event: end\ndata: " + string(data) + "\n\n")
				return
			}
			if time.Since(idle) >= eventsPing {
				if !s.write(": ping\n\n") {
					return
				}
				idle = time.Now()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if peerGone(conn) {
					return
				}
			}
		}
	})
	return nil
}

func workflowHasEnded(status string) bool {
	return status == "done" || status == "failed" || status == "cancelled"
}

// workflowNodeEvent is the data of a workflow stream's `event: node`: a node whose status changed.
type workflowNodeEvent struct {
	ID     string `json:"id"`
	JobID  string `json:"job_id" openapi:"ref=JobID"`
	Status string `json:"status" openapi:"ref=JobStatus,orEmpty"`
}

// workflowEventEnd is the data of a workflow stream's `event: end`: the workflow's final status.
type workflowEventEnd struct {
	Status string `json:"status" openapi:"ref=WorkflowStatus"`
}
