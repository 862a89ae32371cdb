package jobstore

import (
	"context"
	"encoding/json"
	"time"

	"github.com/redis/go-redis/v9"
)

// Event is one entry of a job's timeline. The names (Event) are the same as the log's event field.
type Event struct {
	// Seq is the event's position among every event pushed to the job's timeline since its
	// creation (0 first): stored with the event (timeline_push writes it), so the cap's trim does
	// not shift it. It is the id of the event's SSE message, not a member of its JSON.
	Seq      int64  `json:"-"`
	At       int64  `json:"at"`
	Event    string `json:"event"`
	Delivery string `json:"delivery,omitempty"`
	Token    int64  `json:"token,omitempty"`
	Attempt  int    `json:"attempt,omitempty"`
	Worker   string `json:"worker,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// eventJSON stamps e with now and this worker, and encodes it.
func (s *Store) eventJSON(e Event, now time.Time) string {
	e.At, e.Worker = now.UnixMilli(), s.cfg.WorkerID
	b, _ := json.Marshal(e)
	return string(b)
}

// QueueEvents adds the append of events to a job's timeline to pipe (without changing its
// status: bounces, lost leases), keeping the record alive for another retention. Eval, not
// EvalSha, keeps the pipeline free of NOSCRIPT retries. Best effort: the timeline is forensics.
func (s *Store) QueueEvents(ctx context.Context, pipe redis.Pipeliner, k Keys, now time.Time, events ...Event) {
	eventScript.Eval(ctx, pipe, []string{k.Timeline, k.Record}, s.eventArgs(now, events)...)
}

// AddEvents is QueueEvents on its own: sent by its SHA (the script's 1.8 KB are not sent and
// hashed again for every bounce), and sent whole when Redis lost its scripts.
func (s *Store) AddEvents(ctx context.Context, k Keys, now time.Time, events ...Event) error {
	return eventScript.Run(ctx, s.rdb, []string{k.Timeline, k.Record}, s.eventArgs(now, events)...).Err()
}

// eventArgs are the event script's arguments: the timeline's cap, the retention, the events.
func (s *Store) eventArgs(now time.Time, events []Event) []any {
	args := []any{s.cfg.TimelineCap, ms(s.cfg.Retention)}
	for _, e := range events {
		args = append(args, s.eventJSON(e, now))
	}
	return args
}
