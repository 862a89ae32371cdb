package jobstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/locking"
)

// A timeline's positions are stable when the cap trims it: TimelineSince(n) starts at the event
// pushed n-th since the job's creation, not at list index n of what is kept.
func TestTimelinePositionsSurviveTheCap(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	s := New(db.Client, locking.New(db.Client), Config{WorkerID: "w", TimelineCap: 3})
	id := NewJobID("r", time.Now())
	k, err := s.Keys(id, "")
	if err != nil {
		t.Fatal(err)
	}
	s.rdb.HSet(bg, k.Record, FieldJobID, id, FieldStatus, string(StatusQueued))
	for i := range 6 {
		pipe := s.rdb.Pipeline()
		s.QueueEvents(bg, pipe, k, time.Now(), Event{Event: "bounced", Detail: fmt.Sprintf("e%d", i)})
		if _, err := pipe.Exec(bg); err != nil {
			t.Fatal(err)
		}
	}
	p, err := s.TimelineSince(bg, id, 4)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range p.Events {
		got = append(got, e.Detail)
	}
	if fmt.Sprint(got) != "[e4 e5]" {
		t.Fatalf("TimelineSince(4) after a trim to 3 of 6 events: %v, want [e4 e5]", got)
	}
}

// A position past any event a job can have is read as the position after its last event: the
// status and no events, for every int64 (Lua's numbers are doubles, and LRANGE was sent 1e+17,
// which Redis refused; found by an adversarial probe through Last-Event-ID).
func TestTimelineSinceFarPositions(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	s := New(db.Client, locking.New(db.Client), Config{WorkerID: "w", TimelineCap: 3})
	id := NewJobID("r", time.Now())
	k, err := s.Keys(id, "")
	if err != nil {
		t.Fatal(err)
	}
	s.rdb.HSet(bg, k.Record, FieldJobID, id, FieldStatus, string(StatusQueued))
	pipe := s.rdb.Pipeline()
	s.QueueEvents(bg, pipe, k, time.Now(), Event{Event: "bounced"})
	if _, err := pipe.Exec(bg); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int64{2, 1 << 31, 100000000000000000, 1<<53 + 1, 1<<63 - 1} {
		p, err := s.TimelineSince(bg, id, n)
		if err != nil || p.Status != StatusQueued || len(p.Events) != 0 {
			t.Fatalf("TimelineSince(%d): %+v, %v; want the status and no events", n, p, err)
		}
	}
}
