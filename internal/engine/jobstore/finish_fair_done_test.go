package jobstore

import (
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/locking"
)

// A fair job's done sent in its finish's pipeline frees its admission only when the finish ended
// the job: a stale finish (a newer token owns the job) and a finish that runs after the done (its
// script was missing and is sent again) leave the admission held, for the caller's other path.
func TestFinishFreesTheFairAdmissionOnlyWhenItEnded(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t) // its own server: the test flushes the script cache
	rdb := srv.Client(t, 0)
	s := New(rdb, locking.New(rdb), Config{WorkerID: "w"})
	sh := FairShard{Type: "x"}
	p := FairPolicy{Capacity: 1, Batch: 8}
	wait := func(key string) (string, Keys) {
		id, k := confirmedJobWaiting(t, s, key)
		if _, err := s.FairWait(bg, sh, key, id, "", 1, p, false); err != nil {
			t.Fatal(err)
		}
		return id, k
	}
	a, ka := wait("a")
	b, kb := wait("b")
	c, _ := wait("c")
	finish := func(id string, k Keys, token int64) Finishing {
		t.Helper()
		f, err := s.Finish(bg, k, FinishArgs{Delivery: DeliveryID(id, 1), Token: token, Owner: "owner-a", Now: time.Now(),
			Outcome: Outcome{Status: StatusDone}, FairDone: &FairDoneCall{Shard: sh, Policy: p, Status: StatusDone}, JobID: id})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	start := func(id string, k Keys) int64 {
		t.Helper()
		st, err := s.Start(bg, k, StartArgs{Delivery: DeliveryID(id, 1), Owner: "owner-a", LeaseTTL: 5 * time.Second, Now: time.Now()})
		if err != nil || st.State != Run {
			t.Fatalf("start %s: %v %v", id, st.State, err)
		}
		return st.Token
	}
	admitted := func() []string {
		t.Helper()
		es, err := s.FairAdmittedJobs(bg, sh)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, e := range es {
			ids = append(ids, e.JobID)
		}
		return ids
	}

	token := start(a, ka)
	if f := finish(a, ka, token-1); f.State != StaleWrite || f.FairDone.Freed != 0 || f.FairDone.Err != nil {
		t.Fatalf("stale finish: %+v, want stale and nothing freed", f)
	}
	if got := admitted(); len(got) != 1 || got[0] != a {
		t.Fatalf("after a stale finish, admitted %v, want %s alone", got, a)
	}
	f := finish(a, ka, token)
	if f.State != Finished || f.FairDone.Freed != 1 || len(f.FairDone.Admitted) != 1 || f.FairDone.Admitted[0].JobID != b {
		t.Fatalf("finish of %s: %+v, want it freed and %s admitted", a, f, b)
	}

	token = start(b, kb)
	// Only the done's script in Redis: the finish meets NOSCRIPT and runs after the done.
	rdb.ScriptFlush(bg)
	if err := fairDoneScript.Load(bg, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	if f := finish(b, kb, token); f.State != Finished || f.FairDone.Freed != 0 || len(f.FairDone.Admitted) != 0 {
		t.Fatalf("finish run after its done: %+v, want finished and nothing freed", f)
	}
	if got := admitted(); len(got) != 1 || got[0] != b {
		t.Fatalf("after a done that ran first, admitted %v, want %s alone (%s waits)", got, b, c)
	}

	// b's record says done, as a finish of another run ending it done would write: a done sent with
	// that finish but not its time frees nothing (a stale run's finish whose status matches).
	fd := FairDoneCall{Shard: sh, Policy: p, Status: StatusDone}
	if a := fd.answer(fd.call(s, kb.Record, b, time.Now().Add(-time.Hour)).eval(bg, rdb)); a.Freed != 0 || a.Err != nil {
		t.Fatalf("a done with another finish's time: %+v, want nothing freed", a)
	}
	if got := admitted(); len(got) != 1 || got[0] != b {
		t.Fatalf("after a done with another finish's time, admitted %v, want %s alone", got, b)
	}
}
