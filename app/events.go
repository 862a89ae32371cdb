package app

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

const (
	// eventsPoll is how often a stream reads the job's timeline (one HGET and one LRANGE).
	eventsPoll = 250 * time.Millisecond
	// eventsPing is how long a stream may be idle before it writes a heartbeat comment.
	eventsPing = 15 * time.Second
	// eventsMaxStream ends a stream that lasted this long; the client reconnects with Last-Event-ID.
	eventsMaxStream = 10 * time.Minute
	// eventsWriteSlack is the write deadline each write gets: the server's WriteTimeout (30 s) is set
	// once per response and would cut every stream after 30 s.
	eventsWriteSlack = 30 * time.Second
)

// events is GET /jobs/{id}/events: the job's timeline as server-sent events, then `event: end`
// with the status once the job has ended. Each event's id is its position in the timeline since
// the job's creation (0 first), stored with the event (jobstore.Event.Seq), so ids do not shift
// when the timeline's cap drops the oldest; Last-Event-ID: n resumes after position n (from the
// oldest kept when the events after n were dropped). The tenant rule is the job view's (another
// tenant's job is 404 before any stream starts).
//
// The stream outlives the handler (fasthttp runs the writer after it returns), so it runs on its
// own context: the App's stream context (cancelled when the app stops) bounded by eventsMaxStream;
// each poll gets REQUEST_TIMEOUT of its own. A failed write (the client left) ends it.
func (a *api) events(c *fiber.Ctx) error {
	from := int64(0)
	if raw := c.Get("Last-Event-ID"); raw != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 64)
		if err != nil || n < 0 {
			return &HTTPError{Status: http.StatusBadRequest, Field: "Last-Event-ID", Detail: "Last-Event-ID must be the id of an event of this stream"}
		}
		from = n + 1
	}
	timeout := 5 * time.Second
	if d, ok := c.UserContext().Deadline(); ok {
		timeout = time.Until(d) // what requestDeadline left of REQUEST_TIMEOUT
	}
	v, err := a.load(c)
	if err != nil {
		return err
	}
	id := strings.Clone(v.Record.JobID) // nothing of the request is used once the handler returned
	store, conn := a.stack.Store(), c.Context().Conn()
	base := context.WithoutCancel(c.UserContext()) // request id and trace, not the request's deadline

	c.Set(fiber.HeaderContentType, "text/event-stream")
	c.Set(fiber.HeaderCacheControl, "no-cache") // a stream is never stored by a proxy
	c.Set("X-Accel-Buffering", "no")            // proxies pass each event on at once
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		ctx, cancel := context.WithTimeout(a.streams, eventsMaxStream)
		defer cancel()
		s := eventStream{w: w, conn: conn, next: from}
		tick := time.NewTicker(eventsPoll)
		defer tick.Stop()
		idle := time.Now()
		for { // the first read is at once: an ended job's stream is its timeline and the end
			rctx, rcancel := context.WithTimeout(base, timeout)
			p, err := store.TimelineSince(rctx, id, s.next)
			rcancel()
			if err != nil {
				return // Redis failed or let the job go: the client reconnects and learns which
			}
			if len(p.Events) > 0 {
				if !s.send(p.Events) {
					return
				}
				idle = time.Now()
			}
			if p.Status.Terminal() {
				s.end(p.Status)
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
				return // the app stops or the stream is old: the client reconnects with Last-Event-ID
			case <-tick.C:
			}
		}
	})
	return nil
}

// eventStream writes server-sent events; next is the position of the next event to read.
type eventStream struct {
	w    *bufio.Writer
	conn interface{ SetWriteDeadline(time.Time) error }
	next int64
}

// send writes events (each with its position as id) and flushes; false when the client is gone.
func (s *eventStream) send(events []jobstore.Event) bool {
	var b strings.Builder
	for _, e := range events {
		data, _ := json.Marshal(e)
		fmt.Fprintf(&b, "id: %d\ndata: %s\n\n", e.Seq, data)
		s.next = e.Seq + 1
	}
	return s.write(b.String())
}

// end writes the final event with the job's status.
func (s *eventStream) end(st jobstore.Status) {
	data, _ := json.Marshal(map[string]string{"status": string(st)})
	s.write("event: end\ndata: " + string(data) + "\n\n")
}

func (s *eventStream) write(text string) bool {
	if s.conn != nil {
		_ = s.conn.SetWriteDeadline(time.Now().Add(eventsWriteSlack))
	}
	if _, err := s.w.WriteString(text); err != nil {
		return false
	}
	return s.w.Flush() == nil
}
