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
