package jobstore

import (
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/redistest"
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
		st, _, admitted, waited, err := s.CreateAndWait(bg, k, NewJob{ID: id, Type: "x", Queue: "default", Resource: resource,
			MaxAttempts: 3, Now: time.Now(), ClaimTTL: time.Minute, Waiting: true, FairKey: "k"}, call)
		if err != nil {
			t.Fatal(err)
		}
		return id, st, admitted, waited
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
