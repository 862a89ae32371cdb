package jobstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// TimelinePage is what TimelineSince read: the events from a position on, and the job's status
// read just before them; Events[i] is at position n+i (an end is written with its event in one script, so a page whose status
// has ended holds the last event).
type TimelinePage struct {
	Events []Event
	Status Status
}

// TimelineSince reads a job's status and its timeline from position n (0: the first kept event)
// in one round trip: an HGET and an LRANGE, no record decode. A job Redis no longer has is
// ErrNotFound.
func (s *Store) TimelineSince(ctx context.Context, id string, n int64) (TimelinePage, error) {
	k, err := s.Keys(id, "")
	if err != nil {
		return TimelinePage{}, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	pipe := s.rdb.Pipeline()
	st := pipe.HGet(ctx, k.Record, FieldStatus) // before the LRANGE: see TimelinePage
	tl := pipe.LRange(ctx, k.Timeline, n, -1)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return TimelinePage{}, fmt.Errorf("jobstore: read timeline of %s: %w", id, err)
	}
	if st.Val() == "" {
		return TimelinePage{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	p := TimelinePage{Status: Status(st.Val())}
	for _, raw := range tl.Val() {
		var e Event
		if json.Unmarshal([]byte(raw), &e) != nil {
			e = Event{Event: "unreadable"} // kept, so that Events[i] stays at position n+i
		}
		p.Events = append(p.Events, e)
	}
	return p, nil
}
