package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// A fair job enqueued without a dedup, a gate or an id of the caller's waits and is confirmed in
// its create's round trip: one round trip for a job that waits, where the confirmation was a round
// trip of its own before (and the wait one more before that). A caller's Finally, which must see
// the confirmation in a pipeline of its own round trip, keeps that round trip.
func TestAFairEnqueueWaitsAndIsConfirmedInItsCreatesRoundTrip(t *testing.T) {
	t.Parallel()
	trips := &testsupport.RoundTrips{}
	s, client, _, _ := warmFairStack(t, trips, "waits", 1) // the warm job takes the capacity
	finally := func(context.Context, redis.Pipeliner, Enqueued) {}
	for _, c := range []struct {
		tenant  string
		finally func(context.Context, redis.Pipeliner, Enqueued)
		trips   int64
	}{{"a", nil, 1}, {"b", nil, 1}, {"c", finally, 2}} {
		before := trips.N()
		res, err := s.Enqueue(bg, client, Spec{Type: "waits", Tenant: c.tenant, Finally: c.finally})
		if err != nil {
			t.Fatal(err)
		}
		if n := trips.N() - before; n != c.trips || !res.Waiting {
			t.Errorf("a fair enqueue of %s: %d round trips (waiting %v), want %d", c.tenant, n, res.Waiting, c.trips)
		}
		if v, err := s.Get(bg, res.JobID); err != nil || v.Record.Status != jobstore.StatusWaiting {
			t.Errorf("job of %s: %s (%v), want waiting", c.tenant, v.Record.Status, err)
		}
		if ok, err := s.JobConfirmed(bg, res.JobID); !ok || err != nil {
			t.Errorf("job of %s confirmed: %v (%v)", c.tenant, ok, err)
		}
		if page, err := s.List(bg, ListQuery{Tenant: c.tenant}); err != nil || len(page.Jobs) != 1 || page.Jobs[0].JobID != res.JobID {
			t.Errorf("the tenant's list of %s: %+v (%v), want its job", c.tenant, page.Jobs, err)
		}
	}
	if c, err := s.FairCounts(bg, "waits", 0); err != nil || c.Admitted != 1 || c.WaitingKeys != 3 {
		t.Errorf("counts %+v (%v): want 1 admitted, 3 keys waiting", c, err)
	}
}

// A fair enqueue whose create, wait and confirmation ran, then ran again because the client sent
// the pipeline again (go-redis retries one after a lost reply; the app allows one retry): the
// create answers exists, the confirmation confirmed. The job stands, and the enqueue says so. With
// a caller's Finally the confirmation is not in that pipeline: the enqueue fails, and the job's
// record goes at once, so the admission its wait took is freed by the next sweep, not delivered
// again and again until the record's claim runs out.
func TestAFairEnqueueSentTwiceLeavesNoAdmissionBehind(t *testing.T) {
	t.Parallel()
	twice := &createPipelineFault{}
	s, client, db, first := warmFairStack(t, twice, "twice", 4)
	twice.armed.Store(true)
	stands, err := s.Enqueue(bg, client, Spec{Type: "twice", Tenant: "t1", Resource: "sent-twice"})
	if err != nil || twice.armed.Load() {
		t.Fatalf("an enqueue whose create and confirmation ran twice: %+v, %v (hook armed still: %v)", stands, err, twice.armed.Load())
	}
	if ok, err := s.JobConfirmed(bg, stands.JobID); !ok || err != nil {
		t.Fatalf("the job whose pipeline ran twice is confirmed: %v (%v)", ok, err)
	}
	// Sent again once the first confirmation's deadline has passed: the second finds it past (and
	// the create its record), yet the job the first confirmed stands.
	twice.pause = 200 * time.Millisecond
	twice.armed.Store(true)
	ctx, cancel := context.WithTimeout(bg, 400*time.Millisecond) // the confirmation's deadline: 150 ms
	late, err := s.Enqueue(ctx, client, Spec{Type: "twice", Tenant: "t2", Resource: "sent-twice-late"})
	cancel()
	twice.pause = 0
	if err != nil || twice.armed.Load() {
		t.Fatalf("an enqueue whose pipeline ran again past the deadline: %+v, %v", late, err)
	}
	if ok, err := s.JobConfirmed(bg, late.JobID); !ok || err != nil {
		t.Fatalf("the job confirmed by the first send stands: %v (%v)", ok, err)
	}
	twice.armed.Store(true)
	res, err := s.Enqueue(bg, client, Spec{Type: "twice", Tenant: "t1", Resource: "sent-twice-finally", Finally: func(context.Context, redis.Pipeliner, Enqueued) {}})
	if err == nil || twice.armed.Load() {
		t.Fatalf("an enqueue whose create ran twice: %+v, %v (hook armed still: %v)", res, err, twice.armed.Load())
	}
	admitted, err := s.store.FairAdmittedJobs(bg, jobstore.FairShard{Type: "twice"})
	if err != nil || len(admitted) != 4 {
		t.Fatalf("admitted before the sweep: %+v (%v), want the four jobs", admitted, err)
	}
	for _, e := range admitted {
		if n := db.Client.Exists(bg, keysOr(s, e.JobID).Record).Val(); e.JobID != first.JobID && e.JobID != stands.JobID && e.JobID != late.JobID && n != 0 {
			t.Errorf("the refused job %s's record is left", e.JobID)
		}
	}
	if _, err := s.SweepFair(bg); err != nil {
		t.Fatal(err)
	}
	// The admissions of the jobs that stand stay (they wait for a handler); the refused one's is freed.
	if c, err := s.FairCounts(bg, "twice", 0); err != nil || c.Admitted != 3 {
		t.Errorf("after a sweep: %+v (%v), want the three jobs that stand admitted (%s, %s, %s)", c, err, first.JobID, stands.JobID, late.JobID)
	}
}

// createPipelineFault, once armed, runs the first create-and-wait pipeline (its second call names a
// fair admission key) and then, when lose is set, loses its reply; otherwise it runs it again after
// pause, as go-redis does when a pipeline's reply is lost and it retries. With cut it loses the
// pipeline without running it.
type createPipelineFault struct {
	testsupport.PipelinesOnly
	armed     atomic.Bool
	lose, cut bool
	pause     time.Duration
}

func (h *createPipelineFault) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) < 2 || !strings.Contains(fmt.Sprint(cmds[1].Args()), "fair:ready") || !h.armed.CompareAndSwap(true, false) {
			return next(ctx, cmds)
		}
		if !h.cut {
			_ = next(ctx, cmds)
		}
		if !h.lose {
			time.Sleep(h.pause)
			return next(ctx, cmds)
		}
		lost := errors.New("read tcp: i/o timeout")
		for _, c := range cmds {
			c.SetErr(lost)
		}
		return lost
	}
}

// A fair enqueue whose create-wait-confirm pipeline's reply was lost reads the job's record: a job
// its confirmation confirmed stands, and the enqueue says so. One whose pipeline never reached
// Redis is answered ErrOutcomeUnknown (a pipeline stalled on the way could still land), and its
// record is gone.
func TestAFairEnqueueWhoseReplyWasLostReadsItsRecord(t *testing.T) {
	t.Parallel()
	lost := &createPipelineFault{lose: true}
	s, client, _, _ := warmFairStack(t, lost, "lost", 1)
	lost.armed.Store(true)
	res, err := s.Enqueue(bg, client, Spec{Type: "lost", Tenant: "t1"})
	if err != nil || lost.armed.Load() {
		t.Fatalf("an enqueue whose reply was lost after it ran: %+v, %v (hook armed still: %v)", res, err, lost.armed.Load())
	}
	if v, err := s.Get(bg, res.JobID); err != nil || v.Record.Status != jobstore.StatusWaiting {
		t.Fatalf("the job whose reply was lost: %s (%v), want waiting", v.Record.Status, err)
	}
	lost.cut = true
	lost.armed.Store(true)
	_, err = s.Enqueue(bg, client, Spec{Type: "lost", Tenant: "t2"})
	job, unknown := UnknownJob(err)
	if !unknown || !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("an enqueue whose pipeline never reached Redis: %v, want its outcome unknown", err)
	}
	if ok, err := s.JobConfirmed(bg, job.JobID); ok || err != nil {
		t.Fatalf("the job whose pipeline never ran is confirmed: %v (%v)", ok, err)
	}
}
