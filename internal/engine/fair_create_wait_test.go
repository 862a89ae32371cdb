package engine

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// warmFairStack is a stack whose client carries hook, with fair type typ of capacity, and one job
// of tenant "warm" enqueued: the scripts are loaded (no NOSCRIPT in what follows) and the job holds
// one place of the capacity.
func warmFairStack(t *testing.T, hook redis.Hook, typ string, capacity int) (*Stack, *asynq.Client, redistest.DB, Enqueued) {
	t.Helper()
	db := redistest.NewDB(t)
	rdb := redis.NewClient(&redis.Options{Addr: db.Server.Addr, DB: db.N})
	rdb.AddHook(hook)
	t.Cleanup(func() { _ = rdb.Close() })
	s := New(rdb, Config{Concurrency: 2, WorkerID: "w"})
	s.Register(TaskConfig{Type: typ, Fair: &Fair{Capacity: capacity}}, func(ctx context.Context, j *Job) error { return nil })
	t.Cleanup(s.Close)
	client := asynq.NewClientFromRedisClient(db.Client)
	warm, err := s.Enqueue(bg, client, Spec{Type: typ, Tenant: "warm"})
	if err != nil {
		t.Fatal(err)
	}
	return s, client, db, warm
}

// A fair job enqueued without a dedup, a gate or an id of the caller's waits in its create's
// round trip: two round trips (create and wait, confirm) for a job that waits, where the wait was
// a round trip of its own before.
func TestAFairEnqueueWaitsInItsCreatesRoundTrip(t *testing.T) {
	t.Parallel()
	trips := &testsupport.RoundTrips{}
	s, client, _, _ := warmFairStack(t, trips, "waits", 1) // the warm job takes the capacity
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

// A fair enqueue whose create and wait ran, then ran again because the client sent the pipeline
// again (go-redis retries one after a lost reply; the app allows one retry): the create answers
// exists and the enqueue fails. The job's record goes at once, so the admission its wait took is
// freed by the next sweep, not delivered again and again until the record's claim runs out.
func TestAFairEnqueueSentTwiceLeavesNoAdmissionBehind(t *testing.T) {
	t.Parallel()
	twice := &pipelineSentTwice{}
	s, client, db, first := warmFairStack(t, twice, "twice", 2)
	twice.armed.Store(true)
	res, err := s.Enqueue(bg, client, Spec{Type: "twice", Tenant: "t1", Resource: "sent-twice"})
	if err == nil || twice.armed.Load() {
		t.Fatalf("an enqueue whose create ran twice: %+v, %v (hook armed still: %v)", res, err, twice.armed.Load())
	}
	admitted, err := s.store.FairAdmittedJobs(bg, jobstore.FairShard{Type: "twice"})
	if err != nil || len(admitted) != 2 {
		t.Fatalf("admitted before the sweep: %+v (%v), want the two jobs", admitted, err)
	}
	for _, e := range admitted {
		if n := db.Client.Exists(bg, keysOr(s, e.JobID).Record).Val(); e.JobID != first.JobID && n != 0 {
			t.Errorf("the refused job %s's record is left", e.JobID)
		}
	}
	if _, err := s.SweepFair(bg); err != nil {
		t.Fatal(err)
	}
	// The first job's admission stays (it waits for a handler); the refused one's is freed.
	if c, err := s.FairCounts(bg, "twice", 0); err != nil || c.Admitted != 1 {
		t.Errorf("after a sweep: %+v (%v), want the first job alone admitted (%s)", c, err, first.JobID)
	}
}

// pipelineSentTwice runs, once armed, the first create-and-wait pipeline (two calls, the second
// naming a fair admission key) twice, as go-redis does when a pipeline's reply is lost and it
// retries.
type pipelineSentTwice struct {
	testsupport.PipelinesOnly
	armed atomic.Bool
}

func (h *pipelineSentTwice) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) != 2 || !strings.Contains(fmt.Sprint(cmds[1].Args()), "fair:ready") || !h.armed.CompareAndSwap(true, false) {
			return next(ctx, cmds)
		}
		_ = next(ctx, cmds)
		return next(ctx, cmds)
	}
}
