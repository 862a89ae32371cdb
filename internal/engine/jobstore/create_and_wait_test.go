package jobstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
	"github.com/jobguard/jobguard/locking"
)

// CreateAndWait sends a fair job's wait in its create's pipeline: the job is created and waits,
// admitted at once when its type has room. A wait that runs before its create (the create's script
// was missing and is sent again after it) finds no record and puts nothing in the key's list: the
// caller is told to wait on its own.
func TestCreateAndWaitWaitsOnlyForACreatedJob(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t) // its own server: the test flushes the script cache
	rdb := srv.Client(t, 0)
	s := New(rdb, locking.New(rdb), Config{WorkerID: "w"})
	sh := FairShard{Type: "x"}
	call := FairWaitCall{Shard: sh, Key: "k", Policy: FairPolicy{Capacity: 1, Batch: 8}}
	createAndWait := func(resource string) (string, CreateState, []FairEntry, bool) {
		id := NewJobID(resource, time.Now())
		k, err := s.Keys(id, "")
		if err != nil {
			t.Fatal(err)
		}
		cw, err := s.CreateAndWait(bg, k, NewJob{ID: id, Type: "x", Queue: "default", Resource: resource,
			MaxAttempts: 3, Now: time.Now(), ClaimTTL: time.Minute, Waiting: true, FairKey: "k"}, call, nil)
		if err != nil {
			t.Fatal(err)
		}
		return id, cw.State, cw.Admitted, cw.Waited
	}
	first, st, admitted, waited := createAndWait("r1")
	if st != Created || !waited || len(admitted) != 1 || admitted[0].JobID != first {
		t.Fatalf("create and wait: %v, waited %v, admitted %+v; want created, waited and admitted", st, waited, admitted)
	}
	// Only the wait's script in Redis: the create meets NOSCRIPT and runs after the wait.
	rdb.ScriptFlush(bg)
	if err := fairWaitScript.Load(bg, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	second, st, admitted, waited := createAndWait("r2")
	k := s.FairKeys(sh)
	if st != Created || waited || len(admitted) != 0 {
		t.Fatalf("create run after its wait: %v, waited %v, admitted %+v; want created, not waited", st, waited, admitted)
	}
	if n := rdb.LLen(bg, k.WaitPrefix+"k").Val(); n != 0 || rdb.HExists(bg, k.Once, second).Val() {
		t.Fatalf("a wait that found no record left %d entries (once hash holds the job: %v)", n, rdb.HExists(bg, k.Once, second).Val())
	}
}

// A confirmation sent with the create and the wait confirms the job in their round trip, with
// what it carries after it. When the create and the wait meet NOSCRIPT they are sent again after
// it: it ran first and found no record, answers gone, and the caller confirms on its own. When the
// wait alone does, it finds the record but not the job waiting, and answers unwaited.
func TestCreateAndWaitConfirmsInTheSameRoundTrip(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t) // its own server: the test flushes the script cache
	rdb := srv.Client(t, 0)
	s := New(rdb, locking.New(rdb), Config{WorkerID: "w"})
	call := FairWaitCall{Shard: FairShard{Type: "x"}, Key: "k", Policy: FairPolicy{Capacity: 1, Batch: 8}}
	createWaitConfirm := func(resource string) (string, CreatedWaiting, int64) {
		id := NewJobID(resource, time.Now())
		k, err := s.Keys(id, "")
		if err != nil {
			t.Fatal(err)
		}
		trips := &testsupport.RoundTrips{}
		rdb.AddHook(trips)
		also := func(ctx context.Context, pipe redis.Pipeliner) { pipe.Set(ctx, "also:"+id, "1", time.Minute) }
		cw, err := s.CreateAndWait(bg, k, NewJob{ID: id, Type: "x", Queue: "default", Resource: resource,
			MaxAttempts: 3, Now: time.Now(), ClaimTTL: time.Minute, Waiting: true, FairKey: "k"}, call, &ConfirmWith{Also: also})
		if err != nil {
			t.Fatal(err)
		}
		return id, cw, trips.N()
	}
	confirmed := func(id string) bool {
		k, _ := s.Keys(id, "")
		ok, err := s.Confirmed(bg, k)
		if err != nil {
			t.Fatal(err)
		}
		return ok && rdb.Get(bg, "also:"+id).Val() == "1"
	}
	for _, sc := range []*redis.Script{createScript, fairWaitScript, confirmScript} {
		if err := sc.Load(bg, rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}
	id, cw, trips := createWaitConfirm("r1")
	if st, err := cw.Confirmed.Result(); cw.State != Created || !cw.Waited || err != nil || st != Confirmed || trips != 1 || !confirmed(id) {
		t.Fatalf("create, wait and confirm: %v, waited %v, confirmation %v %v, %d round trips, confirmed with what it carries: %v",
			cw.State, cw.Waited, st, err, trips, confirmed(id))
	}
	rdb.ScriptFlush(bg)
	if err := confirmScript.Load(bg, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	id, cw, _ = createWaitConfirm("r2")
	if st, err := cw.Confirmed.Result(); cw.State != Created || !cw.Waited || err != nil || st != ConfirmGone {
		t.Fatalf("confirmation run before its create: %v, waited %v, confirmation %v %v; want created, waited, gone", cw.State, cw.Waited, st, err)
	}
	if k, _ := s.Keys(id, ""); func() bool { ok, _ := s.Confirmed(bg, k); return ok }() {
		t.Fatal("a confirmation that ran before its create confirmed the record")
	}
	// Only the wait's script missing: the create runs, then the confirmation, before the wait sent
	// again after them. A job in no list must not be confirmed: it answers unwaited.
	rdb.ScriptFlush(bg)
	for _, sc := range []*redis.Script{createScript, confirmScript} {
		if err := sc.Load(bg, rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}
	id, cw, _ = createWaitConfirm("r3")
	if st, err := cw.Confirmed.Result(); cw.State != Created || !cw.Waited || err != nil || st != ConfirmUnwaited || confirmed(id) {
		t.Fatalf("confirmation run before its wait: %v, waited %v, confirmation %v %v, confirmed %v; want created, waited, unwaited, not confirmed",
			cw.State, cw.Waited, st, err, confirmed(id))
	}
}
