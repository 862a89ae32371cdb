package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

const (
	// eventsPoll is how often a job's feed reads its status and timeline (one round trip, shared
	// by the job's streams), and how often a stream looks whether its client has gone.
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
// oldest kept when the events after n were dropped; after the job's last event when n is past
// it). The tenant rule is the job view's (another tenant's job is 404 before any stream starts).
//
// The streams of one job share one poller (feeds): Redis pays per job followed. Open streams are
// capped per tenant and per process (429 too_many_streams). The stream outlives the handler
// (fasthttp runs the writer after it returns), so it runs on its own context: the App's stream
// context (cancelled when the app stops) bounded by eventsMaxStream. It ends when a write fails
// or, checked at each poll interval, when its client has closed the connection (peerGone).
func (a *api) events(c *fiber.Ctx) error {
	from, err := lastEventID(c.Get("Last-Event-ID"))
	if err != nil {
		return err
	}
	v, err := a.load(c)
	if err != nil {
		return err
	}
	release, err := a.admitStream(c)
	if err != nil {
		return err
	}
	id := strings.Clone(v.Record.JobID) // nothing of the request is used once the handler returned
	conn := c.Context().Conn()

	c.Set(fiber.HeaderContentType, "text/event-stream")
	c.Set(fiber.HeaderCacheControl, "no-cache") // a stream is never stored by a proxy
	c.Set("X-Accel-Buffering", "no")            // proxies pass each event on at once
	// The headers go at once, not with the first event: a stream resumed after the last event of
	// a quiet job may have none to send for a long time, and the client waits for them.
	c.Context().Response.ImmediateHeaderFlush = true
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		defer release()
		ctx, cancel := context.WithTimeout(a.streams, eventsMaxStream)
		defer cancel()
		f := a.feeds.join(id)
		defer a.feeds.leave(f)
		s := eventStream{w: w, conn: conn, next: from}
		check := time.NewTicker(eventsPoll)
		defer check.Stop()
		idle := time.Now()
		for { // an ended job's stream is its timeline and the end, as soon as the feed's first read is in
			v := f.since(&s.next)
			if v.read {
				if v.err != nil {
					return // Redis failed or let the job go: the client reconnects and learns which
				}
				if len(v.events) > 0 {
					if !s.send(v.events) {
						return
					}
					idle = time.Now()
				}
				if v.status.Terminal() {
					s.end(v.status)
					return
				}
			}
			select {
			case <-ctx.Done():
				return // the app stops or the stream is old: the client reconnects with Last-Event-ID
			case <-v.changed:
			case <-check.C:
				if peerGone(conn) {
					return
				}
				if time.Since(idle) >= eventsPing {
					if !s.write(": ping\n\n") {
						return
					}
					idle = time.Now()
				}
			}
		}
	})
	return nil
}

// admitStream takes a place under the caps of open streams for the request's caller (streamer);
// a refusal (429 too_many_streams) says when to try again.
func (a *api) admitStream(c *fiber.Ctx) (release func(), err error) {
	release, err = a.feeds.admit(streamer(c))
	if err != nil {
		c.Set(fiber.HeaderRetryAfter, streamsRetryAfter)
	}
	return release, err
}

// streamer is whom an open stream or long-poll counts against: the tenant, or the client's
// address when the API is open (a copy: it outlives the request).
func streamer(c *fiber.Ctx) string {
	if t := tenantOf(c); t != "" {
		return strings.Clone(t)
	}
	return "addr " + c.IP()
}

// lastEventID reads Last-Event-ID strictly: "" (from the start) or the decimal id of an event a
// stream can send, 0 up to math.MaxInt64-1 (so that the position after it fits); the answer is
// the position to read from. Anything else is 400 naming the header.
func lastEventID(raw string) (int64, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return 0, nil
	}
	bad := &problem.HTTPError{Status: http.StatusBadRequest, Field: "Last-Event-ID", Detail: "Last-Event-ID must be the id of an event of this stream"}
	if len(raw) > 19 || strings.TrimLeft(raw, "0123456789") != "" {
		return 0, bad
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || n == math.MaxInt64 {
		return 0, bad
	}
	return n + 1, nil
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
	data, _ := json.Marshal(eventEnd{Status: string(st)})
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

// eventEnd is the data of a job stream's `event: end`: the job's final status.
type eventEnd struct {
	Status string `json:"status" openapi:"ref=JobStatus"`
}
