package jobstore

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/locking"
)

// CreateWith sends the caller's commands and the create in one pipeline; a create that found its
// script missing (a restarted Redis) is sent again alone (loading it), and still creates once.
func TestCreateWithSendsTheCallersCommandsAlong(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t) // its own server: the test flushes the script cache
	rdb := srv.Client(t, 0)
	s := New(rdb, locking.New(rdb), Config{WorkerID: "w"})
	create := func(resource string) (CreateState, *redis.StatusCmd) {
		id := NewJobID(resource, time.Now())
		k, err := s.Keys(id, "")
		if err != nil {
			t.Fatal(err)
		}
		k = s.WithMarker(k, "m", "done")
		var set *redis.StatusCmd
		st, _, err := s.CreateWith(bg, k, NewJob{ID: id, Type: "x", Queue: "default", Resource: resource, MaxAttempts: 3,
			Dedup: "until_done:m", Policy: "until_done", Now: time.Now(), ClaimTTL: time.Minute, MarkerTTL: time.Minute},
			func(pipe redis.Pipeliner) { set = pipe.Set(bg, "alongside:"+resource, "1", time.Minute) })
		if err != nil {
			t.Fatal(err)
		}
		return st, set
	}
	for _, flush := range []bool{false, true} {
		resource := map[bool]string{false: "r1", true: "r2"}[flush]
		if flush {
			rdb.ScriptFlush(bg)
		}
		st, along := create(resource)
		if st != Created || along.Err() != nil || rdb.Exists(bg, "alongside:"+resource).Val() != 1 {
			t.Fatalf("flushed %v: create %v, the caller's command %v", flush, st, along.Err())
		}
		// The first is still unconfirmed: the second is told to ask again.
		if st, _ := create(resource); st != PendingExisting {
			t.Fatalf("flushed %v: the second create of the resource found %v", flush, st)
		}
		if loaded := rdb.ScriptExists(bg, createScript.Hash()).Val(); len(loaded) != 1 || !loaded[0] {
			t.Fatalf("flushed %v: the create script is not in Redis after the create", flush)
		}
	}
}
