package jobstore

import (
	"slices"
	"testing"
	"time"
)

// confirmedJob creates and confirms a job through the store, as an enqueue does.
func confirmedJob(t *testing.T, s *Store) (string, Keys) {
	t.Helper()
	id := NewJobID("r-"+t.Name(), time.Now())
	k, err := s.Keys(id, "")
	if err != nil {
		t.Fatal(err)
	}
	if st, _, err := s.Create(bg, k, NewJob{ID: id, Type: "x", Queue: "default", Resource: "r-" + t.Name(), MaxAttempts: 3,
		Now: time.Now(), ClaimTTL: time.Minute}); err != nil || st != Created {
		t.Fatalf("create: %v %v", st, err)
	}
	pipe := s.rdb.Pipeline()
	c := s.QueueConfirm(bg, pipe, k, id, 0, 0)
	if _, err := pipe.Exec(bg); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Result(); err != nil || st != Confirmed {
		t.Fatalf("confirm: %v %v", st, err)
	}
	return id, k
}

// run starts a job's first delivery and ends it with outcome.
func run(t *testing.T, s *Store, id string, k Keys, outcome Outcome) Started {
	t.Helper()
	st, err := s.Start(bg, k, StartArgs{Delivery: DeliveryID(id, 1), Owner: "owner-a", LeaseTTL: 5 * time.Second, Now: time.Now()})
	if err != nil || st.State != "run" {
		t.Fatalf("start: %v %v", st.State, err)
	}
	f, err := s.Finish(bg, k, FinishArgs{Delivery: DeliveryID(id, 1), Token: st.Token, Owner: "owner-a", Now: time.Now(), Outcome: outcome})
	if err != nil || f.State != Finished {
		t.Fatalf("finish: %v %v", f.State, err)
	}
	return st
}

// since is TimelineSince's events.
func since(t *testing.T, s *Store, id string, n int64) []Event {
	t.Helper()
	p, err := s.TimelineSince(bg, id, n)
	if err != nil {
		t.Fatal(err)
	}
	return p.Events
}

// A job done on its happy path keeps no timeline list, and every reader sees the same three
// events it would have stored, at the same positions; an event pushed afterwards goes on at 3.
func TestAHappyPathFoldsIntoTheRecord(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	id, k := confirmedJob(t, s)
	st, err := s.Start(bg, k, StartArgs{Delivery: DeliveryID(id, 1), Owner: "owner-a", LeaseTTL: 5 * time.Second, Now: time.Now()})
	if err != nil || st.State != "run" {
		t.Fatalf("start: %v %v", st.State, err)
	}
	running, err := s.Load(bg, id)
	if err != nil || len(running.Timeline) != 2 {
		t.Fatalf("running: %+v %v", running.Timeline, err)
	}
	end := time.Now()
	if f, err := s.Finish(bg, k, FinishArgs{Delivery: DeliveryID(id, 1), Token: st.Token, Owner: "owner-a", Now: end,
		Outcome: Outcome{Status: StatusDone}}); err != nil || f.State != Finished {
		t.Fatalf("finish: %v %v", f.State, err)
	}
	if n := s.rdb.Exists(bg, k.Timeline).Val(); n != 0 {
		t.Fatalf("a happy path kept its timeline list: %v", s.rdb.LRange(bg, k.Timeline, 0, -1).Val())
	}
	if by := s.rdb.HGet(bg, k.Record, FieldTimelineFolded).Val(); by != "w" {
		t.Fatalf("fold mark %q, want the enqueuing worker", by)
	}
	done := Event{Seq: 2, At: end.UnixMilli(), Event: "done", Delivery: DeliveryID(id, 1), Token: st.Token, Worker: "w"}
	want := append(slices.Clone(running.Timeline), done)
	v, err := s.Load(bg, id)
	if err != nil || !slices.Equal(v.Timeline, want) {
		t.Fatalf("folded view:\n got %+v\nwant %+v (%v)", v.Timeline, want, err)
	}
	if _, ok := v.Raw[FieldTimelineFolded]; ok {
		t.Fatalf("the view shows the fold mark: %v", v.Raw)
	}
	for n := int64(0); n <= 3; n++ {
		if got := since(t, s, id, n); !slices.Equal(got, want[min(n, 3):]) {
			t.Fatalf("TimelineSince(%d) = %+v, want %+v", n, got, want[min(n, 3):])
		}
	}
	// A later event (a request deduplicated onto the done job) goes on at position 3.
	pipe := s.rdb.Pipeline()
	s.QueueEvents(bg, pipe, k, time.Now(), Event{Event: "deduplicated", Detail: "throttle m"})
	if _, err := pipe.Exec(bg); err != nil {
		t.Fatal(err)
	}
	v, err = s.Load(bg, id)
	if err != nil || len(v.Timeline) != 4 || !slices.Equal(v.Timeline[:3], want) || v.Timeline[3].Seq != 3 || v.Timeline[3].Event != "deduplicated" {
		t.Fatalf("after a later event: %+v %v", v.Timeline, err)
	}
	if got := since(t, s, id, 3); len(got) != 1 || got[0] != v.Timeline[3] {
		t.Fatalf("TimelineSince(3) after a later event: %+v", got)
	}
	if got := since(t, s, id, 1); !slices.Equal(got, v.Timeline[1:]) {
		t.Fatalf("TimelineSince(1) after a later event: %+v", got)
	}
	if got, err := ReadTimeline(bg, s.rdb, k.Record); err != nil || !slices.Equal(got, v.Timeline) {
		t.Fatalf("ReadTimeline: %+v %v", got, err)
	}
}

// Any other path keeps its list as it was: an event between enqueue and start, a retry, a done
// with a detail of its own.
func TestOtherPathsKeepTheirList(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	check := func(name string, k Keys, events int) {
		t.Helper()
		if s.rdb.HExists(bg, k.Record, FieldTimelineFolded).Val() || s.rdb.LLen(bg, k.Timeline).Val() != int64(events) {
			t.Errorf("%s: folded %v, %d events stored, want %d", name, s.rdb.HExists(bg, k.Record, FieldTimelineFolded).Val(),
				s.rdb.LLen(bg, k.Timeline).Val(), events)
		}
	}

	id, k := confirmedJob(t, s)
	pipe := s.rdb.Pipeline()
	s.QueueEvents(bg, pipe, k, time.Now(), Event{Event: "bounced", Delivery: DeliveryID(id, 1), Detail: "no free slot"})
	if _, err := pipe.Exec(bg); err != nil {
		t.Fatal(err)
	}
	run(t, s, id, k, Outcome{Status: StatusDone})
	check("a bounce before the start", k, 4)

	id, k = confirmedJob(t, s)
	run(t, s, id, k, Outcome{Status: StatusDone, Event: "already_applied", Detail: "operation applied by another job"})
	check("a done of its own name", k, 3)

	id, k = confirmedJob(t, s)
	run(t, s, id, k, Outcome{Status: StatusFailed, Error: "boom"})
	check("a failure", k, 3)
}
