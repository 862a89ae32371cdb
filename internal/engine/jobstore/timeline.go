package jobstore

import (
	"context"
	"encoding/json"
	"fmt"
)

// TimelinePage is what TimelineSince read: the events from a position on, and the job's status
// read just before them (an end is written with its event in one script, so a page whose status
// has ended holds the last event). Each event's Seq is its position.
type TimelinePage struct {
	Events []Event
	Status Status
}

// maxPosition is beyond every position a timeline reaches, and exact as a Lua number.
const maxPosition = 1 << 53

// TimelineSince reads a job's status and its timeline from position n (the n-th event pushed
// since the job's creation, 0 first) in one round trip (scripts/timeline.lua). Positions are
// stored with the events, so they do not shift when the cap trims the oldest; when n itself was
// trimmed the page starts at the oldest kept. A job Redis no longer has is ErrNotFound.
func (s *Store) TimelineSince(ctx context.Context, id string, n int64) (TimelinePage, error) {
	k, err := s.Keys(id, "")
	if err != nil {
		return TimelinePage{}, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	n = min(n, maxPosition) // Lua's numbers are doubles
	args := append([]any{n}, foldedArgs...)
	res, err := timelineScript.Run(ctx, s.rdb, []string{k.Record, k.Timeline}, args...).Result()
	if err != nil {
		return TimelinePage{}, fmt.Errorf("jobstore: read timeline of %s: %w", id, err)
	}
	status, rest, err := replyList("timeline", res)
	if err != nil {
		return TimelinePage{}, err
	}
	if status == "" {
		return TimelinePage{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	first, err := intAt("timeline", rest, 0)
	if err != nil {
		return TimelinePage{}, err
	}
	if len(rest) < 1+len(foldedFields) {
		return TimelinePage{}, fmt.Errorf("jobstore: timeline reply of %d values", len(rest)+1)
	}
	rec := map[string]string{}
	for i, f := range foldedFields {
		v, err := stringAt("timeline", rest, 1+i)
		if err != nil {
			return TimelinePage{}, err
		}
		if v != "" { // the fold's mark is never empty: '' is its absence
			rec[f] = v
		}
	}
	p := TimelinePage{Status: Status(status), Events: foldedEvents(id, rec, n)}
	events := rest[1+len(foldedFields):]
	for i := range events {
		raw, err := stringAt("timeline", events, i)
		if err != nil {
			return TimelinePage{}, err
		}
		p.Events = append(p.Events, decodeEvent(raw, first+int64(i)))
	}
	return p, nil
}

// decodeEvent reads a stored event; pos is its position, the Seq of an event stored before
// positions were (and of one that is unreadable, kept so that no position is skipped).
func decodeEvent(raw string, pos int64) Event {
	var e struct {
		Seq *int64 `json:"seq"`
		Event
	}
	if json.Unmarshal([]byte(raw), &e) != nil {
		return Event{Seq: pos, Event: "unreadable"}
	}
	e.Event.Seq = pos
	if e.Seq != nil {
		e.Event.Seq = *e.Seq
	}
	return e.Event
}
