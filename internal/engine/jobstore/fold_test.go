package jobstore

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// confirmedJob creates and confirms a job through the store, as an enqueue does.
func confirmedJob(t *testing.T, s *Store) (string, Keys) {
	t.Helper()
	return confirmedJobWaiting(t, s, "")
}

// confirmedJobWaiting is confirmedJob of a job that waits for fair key key's admission ("": none).
func confirmedJobWaiting(t *testing.T, s *Store, key string) (string, Keys) {
	t.Helper()
	id := NewJobID("r-"+t.Name(), time.Now())
	k, err := s.Keys(id, "")
	if err != nil {
		t.Fatal(err)
	}
	if st, _, err := s.Create(bg, k, NewJob{ID: id, Type: "x", Queue: "default", Resource: "r-" + t.Name(), MaxAttempts: 3,
		Now: time.Now(), ClaimTTL: time.Minute, Waiting: key != "", FairKey: key}); err != nil || st != Created {
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
	if by := s.rdb.HGet(bg, k.Record, FieldTimelineFolded).Val(); by != "3:w" {
		t.Fatalf("fold mark %q, want 3 events and the enqueuing worker", by)
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

// Any other path stores what the record does not say: an event between enqueue and start stores
// the first run's start and end; a done of its own name, or a failure, stores its end; a second
// run writes the first run's lease_acquired out, at its own position, before it replaces the
// fields that event was rebuilt from.
func TestOtherPathsKeepTheirList(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	check := func(name string, k Keys, implied string, events int) {
		t.Helper()
		if mark := s.rdb.HGet(bg, k.Record, FieldTimelineFolded).Val(); mark != implied+":w" || s.rdb.LLen(bg, k.Timeline).Val() != int64(events) {
			t.Errorf("%s: mark %q, %d events stored; want %s:w and %d", name, mark, s.rdb.LLen(bg, k.Timeline).Val(), implied, events)
		}
	}

	id, k := confirmedJob(t, s)
	pipe := s.rdb.Pipeline()
	s.QueueEvents(bg, pipe, k, time.Now(), Event{Event: "bounced", Delivery: DeliveryID(id, 1), Detail: "no free slot"})
	if _, err := pipe.Exec(bg); err != nil {
		t.Fatal(err)
	}
	run(t, s, id, k, Outcome{Status: StatusDone})
	check("a bounce before the start", k, "1", 3)

	id, k = confirmedJob(t, s)
	run(t, s, id, k, Outcome{Status: StatusDone, Event: "already_applied", Detail: "operation applied by another job"})
	check("a done of its own name", k, "2", 1)

	id, k = confirmedJob(t, s)
	run(t, s, id, k, Outcome{Status: StatusFailed, Error: "boom"})
	check("a failure", k, "2", 1)

	id, k = confirmedJob(t, s)
	first := run(t, s, id, k, Outcome{Status: StatusRetrying, Error: "flaky"})
	before, err := s.Load(bg, id)
	if err != nil {
		t.Fatal(err)
	}
	second := run(t, s, id, k, Outcome{Status: StatusDone})
	check("a retry", k, "1", 4)
	v, err := s.Load(bg, id)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range v.Timeline {
		got = append(got, fmt.Sprintf("%d %s a%d t%d", e.Seq, e.Event, e.Attempt, e.Token))
	}
	want := fmt.Sprintf("[0 enqueued a0 t0 1 lease_acquired a1 t%d 2 retry_scheduled a0 t%d 3 lease_acquired a2 t%d 4 done a0 t%d]",
		first.Token, first.Token, second.Token, second.Token)
	if fmt.Sprint(got) != want || !slices.Equal(v.Timeline[:3], before.Timeline) {
		t.Fatalf("a retried job's timeline\n got %v\nwant %s\nbefore the second run %+v", got, want, before.Timeline)
	}
}

// A job that waited for its key's admission folds its waiting event too: done on its happy path
// it keeps no list, and its four events read back at positions 0-3; retried, its second run writes
// the first run's lease_acquired out at position 2, after the waiting the record still stands for.
func TestAWaitingJobFoldsItsWaitToo(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	id, k := confirmedJobWaiting(t, s, "tenant-a")
	st := run(t, s, id, k, Outcome{Status: StatusDone})
	if n := s.rdb.Exists(bg, k.Timeline).Val(); n != 0 {
		t.Fatalf("a waiting job's happy path kept its timeline list: %v", s.rdb.LRange(bg, k.Timeline, 0, -1).Val())
	}
	if mark := s.rdb.HGet(bg, k.Record, FieldTimelineFolded).Val(); mark != "w4:w" {
		t.Fatalf("fold mark %q, want w4:w", mark)
	}
	v, err := s.Load(bg, id)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range v.Timeline {
		got = append(got, fmt.Sprintf("%d %s t%d %s", e.Seq, e.Event, e.Token, e.Detail))
	}
	want := fmt.Sprintf("[0 enqueued t0  1 waiting t0 for its turn on key tenant-a 2 lease_acquired t%d  3 done t%d ]", st.Token, st.Token)
	if fmt.Sprint(got) != want {
		t.Fatalf("a waiting job's folded timeline\n got %v\nwant %s", got, want)
	}
	for n := int64(0); n <= 4; n++ {
		if got := since(t, s, id, n); !slices.Equal(got, v.Timeline[min(n, 4):]) {
			t.Fatalf("TimelineSince(%d) = %+v, want %+v", n, got, v.Timeline[min(n, 4):])
		}
	}

	id, k = confirmedJobWaiting(t, s, "tenant-b")
	first := run(t, s, id, k, Outcome{Status: StatusRetrying, Error: "flaky"})
	second := run(t, s, id, k, Outcome{Status: StatusDone})
	if v, err = s.Load(bg, id); err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, e := range v.Timeline {
		got = append(got, fmt.Sprintf("%d %s a%d t%d", e.Seq, e.Event, e.Attempt, e.Token))
	}
	want = fmt.Sprintf("[0 enqueued a0 t0 1 waiting a0 t0 2 lease_acquired a1 t%d 3 retry_scheduled a0 t%d 4 lease_acquired a2 t%d 5 done a0 t%d]",
		first.Token, first.Token, second.Token, second.Token)
	if fmt.Sprint(got) != want {
		t.Fatalf("a retried waiting job's timeline\n got %v\nwant %s", got, want)
	}
	if mark := s.rdb.HGet(bg, k.Record, FieldTimelineFolded).Val(); mark != "w2:w" {
		t.Fatalf("fold mark after a retry %q, want w2:w", mark)
	}
}
