package engine

import (
	"context"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// A fair job enqueued without a dedup, a gate or an id of the caller's waits in its create's
// round trip: two round trips (create and wait, confirm) for a job that waits, as many as a job
// without fair dispatch before its delivery. Before, the wait was a round trip of its own.
func TestAFairEnqueueWaitsInItsCreatesRoundTrip(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	trips := &testsupport.RoundTrips{}
	rdb := redis.NewClient(&redis.Options{Addr: db.Server.Addr, DB: db.N})
	rdb.AddHook(trips)
	t.Cleanup(func() { _ = rdb.Close() })
	s := New(rdb, Config{Concurrency: 2, WorkerID: "w"})
	s.Register(TaskConfig{Type: "waits", Fair: &Fair{Capacity: 1}}, func(ctx context.Context, j *Job) error { return nil })
	t.Cleanup(s.Close)
	client := asynq.NewClientFromRedisClient(db.Client)
	if _, err := s.Enqueue(bg, client, Spec{Type: "waits", Tenant: "warm"}); err != nil { // loads the scripts, takes the capacity
		t.Fatal(err)
	}
	for _, tenant := range []string{"a", "b"} {
		before := trips.N()
		res, err := s.Enqueue(bg, client, Spec{Type: "waits", Tenant: tenant})
		if err != nil {
			t.Fatal(err)
		}
		if n := trips.N() - before; n != 2 || !res.Waiting {
			t.Errorf("a fair enqueue of %s: %d round trips (waiting %v), want 2", tenant, n, res.Waiting)
		}
		if v, err := s.Get(bg, res.JobID); err != nil || v.Record.Status != jobstore.StatusWaiting {
			t.Errorf("job of %s: %s (%v), want waiting", tenant, v.Record.Status, err)
		}
	}
	if c, err := s.FairCounts(bg, "waits", 0); err != nil || c.Admitted != 1 || c.WaitingKeys != 2 {
		t.Errorf("counts %+v (%v): want 1 admitted, 2 keys waiting", c, err)
	}
}
