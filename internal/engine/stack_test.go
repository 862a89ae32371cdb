package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/locking"
)

func TestSuccessWritesStatusTimelineAndReleases(t *testing.T) {
	t.Parallel()
	var seen atomic.Value
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "ok"}, func(ctx context.Context, j *Job) error {
			seen.Store(fmt.Sprintf("%s attempt=%d token=%d payload=%s", j.ID, j.Attempt, j.Fence().Token, j.Payload))
			j.SetResult("built")
			return nil
		})
	})
	id := h.enqueue(Spec{Type: "ok", Tenant: "t1", Resource: "t1:r1", Payload: []byte(`{"x":1}`)})
	v := h.waitStatus(id, "done", 10*time.Second)
	if got := seen.Load(); got != id+` attempt=1 token=1 payload={"x":1}` {
		t.Fatalf("handler saw %v", got)
	}
	// A done record forgets its run's owner (its fence is sealed): worker and token name the run.
	r := v.Raw
	if r["result"] != "built" || r["attempt"] != "1" || r["fencing_token"] != "1" || r["tenant"] != "t1" ||
		r["finished_at"] == "" || r["lease_owner"] != "" || r["worker_id"] == "" || r["delivery"] != DeliveryID(id, 1) {
		t.Fatalf("record %v", r)
	}
	if got := strings.Join(events(v), ","); got != "enqueued,lease_acquired,done" {
		t.Fatalf("timeline %s", got)
	}
	if v.Lease.Owner != "" || v.Lease.Fence != 1 {
		t.Fatalf("lease after done: %+v", v.Lease)
	}
	// The record expires; the happy path's timeline is folded into it (no list is left).
	tag, _ := TagOf(id)
	if ttl := h.rdb.PTTL(bg, h.stack.locks.Key(tag, "job:"+id)).Val(); ttl <= 0 {
		t.Fatalf("the record has no TTL (%s)", ttl)
	}
	if n := h.rdb.Exists(bg, h.stack.locks.Key(tag, "job:"+id+":timeline")).Val(); n != 0 {
		t.Fatal("a done happy path kept its timeline list")
	}
}

// A delivery that is not the job's current one, or of a job that is terminal, is acknowledged
// without running the handler.
func TestStaleDeliveriesAreAcknowledged(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "count"}, func(ctx context.Context, j *Job) error { runs.Add(1); return nil })
	})
	id := h.enqueue(Spec{Type: "count", Resource: "r"})
	h.waitStatus(id, "done", 10*time.Second)
	// A late duplicate of the done job, and a delivery that was never the current one.
	for _, delivery := range []string{DeliveryID(id, 1) + "-dup", DeliveryID(id, 7)} {
		task := asynq.NewTaskWithHeaders("count", nil, map[string]string{HeaderJobID: id})
		if _, err := h.client.Enqueue(task, asynq.TaskID(delivery)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "both duplicates acknowledged", func() bool { return h.stack.Stats.StaleDeliveries.Load() == 2 })
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times", runs.Load())
	}
	v, _ := h.stack.Get(bg, id)
	if v.Raw["status"] != "done" || v.Raw["attempt"] != "1" {
		t.Fatalf("the duplicates changed the job: %v", v.Record)
	}
}

// Two jobs of one resource never run at once: the second bounces (no attempt spent, even when it
// is its only one) and runs once the first is done.
func TestBounceOnLastAttemptDoesNotSpendIt(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "one-shot", MaxAttempts: 1}, func(ctx context.Context, j *Job) error { return nil })
	})
	tag := ResourceTag("hot")
	holder, err := h.stack.locks.TryAcquire(bg, tag, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	id := h.enqueue(Spec{Type: "one-shot", Resource: "hot"})
	eventually(t, 10*time.Second, "two bounces", func() bool {
		v, _ := h.stack.Get(bg, id)
		n := 0
		for _, e := range v.Timeline {
			if e.Event == "lease_not_acquired" {
				n++
			}
		}
		return n >= 2
	})
	v, _ := h.stack.Get(bg, id)
	if v.Raw["status"] != "queued" || v.Raw["attempt"] != "0" {
		t.Fatalf("bounces changed status or attempt: %v", v.Record)
	}
	_ = holder.Release(bg)
	v = h.waitStatus(id, "done", 10*time.Second)
	if v.Raw["attempt"] != "1" || v.Raw["fencing_token"] != "2" {
		t.Fatalf("after the holder left: %v", v.Record)
	}
}

func TestTransientUntilBudgetSpentThenDeadLetter(t *testing.T) {
	t.Parallel()
	var attempts []int
	var mu sync.Mutex
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "flaky", MaxAttempts: 2, Backoff: Backoff{Base: time.Millisecond, Max: time.Millisecond}},
			func(ctx context.Context, j *Job) error {
				mu.Lock()
				attempts = append(attempts, j.Attempt)
				mu.Unlock()
				return errors.New("upstream 503")
			})
	})
	id := h.enqueue(Spec{Type: "flaky", Resource: "r"})
	v := h.waitStatus(id, "failed", 15*time.Second)
	if v.Raw["attempt"] != "2" || !strings.Contains(v.Raw["last_error"], "upstream 503") {
		t.Fatalf("record %v", v.Record)
	}
	if got := strings.Join(events(v), ","); got != "enqueued,lease_acquired,retry_scheduled,lease_acquired,failed" {
		t.Fatalf("timeline %s", got)
	}
	eventually(t, 5*time.Second, "the delivery is archived", func() bool {
		info, err := h.insp.GetTaskInfo("default", DeliveryID(id, 1))
		return err == nil && info.State == asynq.TaskStateArchived
	})
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(attempts) != "[1 2]" {
		t.Fatalf("attempts %v", attempts)
	}
}

func TestPermanentRevokedAndPanic(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "permanent"}, func(ctx context.Context, j *Job) error {
			return Permanent(errors.New("400 bad request"))
		})
		s.Register(TaskConfig{Type: "revoked"}, func(ctx context.Context, j *Job) error { return Revoked("order cancelled") })
		s.Register(TaskConfig{Type: "panics", MaxAttempts: 1}, func(ctx context.Context, j *Job) error { panic("boom") })
	})
	p := h.enqueue(Spec{Type: "permanent", Resource: "a"})
	r := h.enqueue(Spec{Type: "revoked", Resource: "b"})
	x := h.enqueue(Spec{Type: "panics", Resource: "c"})
	if v := h.waitStatus(p, "failed", 10*time.Second); v.Raw["attempt"] != "1" {
		t.Fatalf("permanent: %v", v.Record)
	}
	if v := h.waitStatus(r, "revoked", 10*time.Second); !strings.Contains(v.Raw["last_error"], "order cancelled") {
		t.Fatalf("revoked: %v", v.Record)
	}
	if v := h.waitStatus(x, "failed", 10*time.Second); !strings.Contains(v.Raw["last_error"], "panic: boom") {
		t.Fatalf("panic: %v", v.Record)
	}
	eventually(t, 5*time.Second, "permanent is archived, revoked is gone", func() bool {
		info, err := h.insp.GetTaskInfo("default", DeliveryID(p, 1))
		_, gone := h.insp.GetTaskInfo("default", DeliveryID(r, 1))
		return err == nil && info.State == asynq.TaskStateArchived && errors.Is(gone, asynq.ErrTaskNotFound)
	})
	if h.stack.Stats.Panics.Load() != 1 {
		t.Fatalf("panics counted: %d", h.stack.Stats.Panics.Load())
	}
}

func TestBackoffGrowsWithFullJitterAndCap(t *testing.T) {
	t.Parallel()
	b := Backoff{Base: time.Second, Max: 10 * time.Second}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := b.Cap(i + 1); got != w {
			t.Fatalf("cap after attempt %d = %s, want %s", i+1, got, w)
		}
	}
	lo, hi := time.Hour, time.Duration(0)
	for i := 0; i < 2000; i++ {
		d := b.Delay(4, nil)
		lo, hi = min(lo, d), max(hi, d)
		if d < minDelay || d > 8*time.Second {
			t.Fatalf("delay %s outside [1s, 8s]", d)
		}
	}
	if hi < 6*time.Second || lo > 2*time.Second {
		t.Fatalf("2000 draws span only [%s, %s]: not full jitter", lo, hi)
	}
	if d := RetryDelay(0, &delayed{delay: 42 * time.Second, err: errors.New("x")}, nil); d != 42*time.Second {
		t.Fatalf("RetryDelay ignores the engine's choice: %s", d)
	}
	if IsFailure(&delayed{bounce: true, err: errors.New("x")}) || !IsFailure(errors.New("x")) {
		t.Fatal("IsFailure must be false for bounces only")
	}
}

func TestRateLimitedBouncesWithoutSpendingAttempts(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "limited", MaxAttempts: 1}, func(ctx context.Context, j *Job) error {
			if calls.Add(1) < 3 {
				return RateLimited(errors.New("429"), time.Second)
			}
			return nil
		})
	})
	id := h.enqueue(Spec{Type: "limited", Resource: "r"})
	v := h.waitStatus(id, "done", 20*time.Second)
	if calls.Load() != 3 || v.Raw["attempt"] != "1" {
		t.Fatalf("calls %d, record %v", calls.Load(), v.Record)
	}
	if !has(v, "rate_limited") {
		t.Fatalf("timeline %v", events(v))
	}
}

// RateLimitMaxAge runs on the engine's clock from the job's creation: once the clock says the job
// is older, a rate limit spends an attempt like a transient error (here the only one).
func TestRateLimitPastMaxAgeSpendsAnAttempt(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	var calls atomic.Int32
	h := newHarness(t, Config{Clock: clock}, func(s *Stack) {
		s.Register(TaskConfig{Type: "limited", MaxAttempts: 1, RateLimitMaxAge: time.Hour}, func(ctx context.Context, j *Job) error {
			if calls.Add(1) == 2 {
				clock.Advance(time.Hour) // this run's rate limit finds the job an hour old
			}
			return RateLimited(errors.New("429"), time.Second)
		})
	})
	id := h.enqueue(Spec{Type: "limited", Resource: "r"})
	v := h.waitStatus(id, "failed", 20*time.Second)
	if calls.Load() != 2 || v.Raw["attempt"] != "1" || !has(v, "rate_limited") {
		t.Fatalf("calls %d, record %v, timeline %v", calls.Load(), v.Record, events(v))
	}
}

func TestCheckpointCarriesOverToTheNextAttempt(t *testing.T) {
	t.Parallel()
	var second atomic.Value
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "steps", Backoff: Backoff{Base: time.Millisecond}}, func(ctx context.Context, j *Job) error {
			if j.Attempt == 1 {
				if err := j.SaveCheckpoint(ctx, []byte("page=7")); err != nil {
					return err
				}
				return errors.New("crashed at page 8")
			}
			second.Store(string(j.Checkpoint))
			return nil
		})
	})
	id := h.enqueue(Spec{Type: "steps", Resource: "r"})
	h.waitStatus(id, "done", 15*time.Second)
	if second.Load() != "page=7" {
		t.Fatalf("second attempt saw checkpoint %v", second.Load())
	}
}

var addEffect = NewEffect(`return redis.call('HINCRBY', KEYS[1], 'total', ARGV[5])`)

// An operation key makes a side effect happen at most once, whichever job carries it.
func TestOperationAppliedOnce(t *testing.T) {
	t.Parallel()
	var handlerRuns atomic.Int32
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "reserve"}, func(ctx context.Context, j *Job) error {
			handlerRuns.Add(1)
			_, err := j.Apply(ctx, addEffect, j.Key("stock"), nil, 5)
			if errors.Is(err, ErrAlreadyApplied) {
				return nil
			}
			return err
		})
	})
	first := h.enqueue(Spec{Type: "reserve", Resource: "sku-1", OpKey: "order-1"})
	h.waitStatus(first, "done", 10*time.Second)
	again := h.enqueue(Spec{Type: "reserve", Resource: "sku-1", OpKey: "order-1"})
	v := h.waitStatus(again, "done", 10*time.Second)
	if v.Raw["result"] != "already_applied" || !has(v, "already_applied") {
		t.Fatalf("second job: %v %v", v.Record, events(v))
	}
	tag := ResourceTag("sku-1")
	if total := h.rdb.HGet(bg, h.stack.locks.Key(tag, "stock"), "total").Val(); total != "5" || handlerRuns.Load() != 1 {
		t.Fatalf("total %s after %d handler runs", total, handlerRuns.Load())
	}
}

// The lease is lost mid-handler: the handler's context ends with ErrLeaseLost as its cause, its
// late writes are rejected, and the job is not regressed; it runs again under a newer token.
func TestLeaseLostMidHandler(t *testing.T) {
	t.Parallel()
	var cause atomic.Value
	var lateWrite atomic.Value
	taken := make(chan struct{})
	h := newHarness(t, Config{LeaseTTL: 2 * time.Second}, func(s *Stack) {
		s.Register(TaskConfig{Type: "slow"}, func(ctx context.Context, j *Job) error {
			if j.Attempt > 1 {
				return nil
			}
			close(taken)
			<-ctx.Done()
			cause.Store(context.Cause(ctx))
			// A careless handler writes anyway, with its old fence.
			lateWrite.Store(s.Locks().SetFields(context.Background(), j.Fence(), j.Key("job:"+j.ID), 0, "status", "done"))
			return ctx.Err()
		})
	})
	id := h.enqueue(Spec{Type: "slow", Resource: "r"})
	<-taken
	tag := ResourceTag("r")
	// Someone else takes the resource and writes the job record with a newer token.
	h.rdb.Set(bg, h.stack.locks.LeaseKey(tag), "intruder", 0)
	newer, _ := h.rdb.Incr(bg, h.stack.locks.FenceKey(tag)).Result()
	if err := h.stack.locks.SetFields(bg, locking.Fence{Token: newer, Owner: "intruder"}, h.stack.locks.Key(tag, "job:"+id), 0, "note", "taken over"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the handler saw its lease lost", func() bool { return cause.Load() != nil })
	if err, _ := cause.Load().(error); !errors.Is(err, locking.ErrLeaseLost) {
		t.Fatalf("cause %v", cause.Load())
	}
	eventually(t, 5*time.Second, "the late write returned", func() bool { return lateWrite.Load() != nil })
	if err, _ := lateWrite.Load().(error); !errors.Is(err, locking.ErrStaleToken) {
		t.Fatalf("late write: %v", lateWrite.Load())
	}
	v, _ := h.stack.Get(bg, id)
	if v.Raw["status"] != "processing" || v.Raw["note"] != "taken over" {
		t.Fatalf("record regressed: %v", v.Record)
	}
	h.rdb.Del(bg, h.stack.locks.LeaseKey(tag)) // the intruder leaves
	v = h.waitStatus(id, "done", 15*time.Second)
	if v.Raw["attempt"] != "2" || v.Raw["fencing_token"] <= fmt.Sprint(newer) {
		t.Fatalf("after the takeover: %v", v.Record)
	}
}

// A worker cut off from Redis mid-run: its first renewal fails, which loses the lease (whether
// Redis extended it is unknown). The handler's context ends with ErrRenewFailed; once the worker
// reaches Redis again, the job's timeline says lease_renew_failed then lease_lost with the run's
// token and delivery, and the job completes under a newer token.
func TestLeaseRenewFailureIsOnTheTimeline(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	px, cutOffOpts := cutOffable(t, db)
	worker := redis.NewClient(cutOffOpts)
	t.Cleanup(func() { worker.Close() }) // after the harness stopped (cleanups run last first)
	var cause atomic.Value
	started, reconnected := make(chan struct{}), make(chan struct{})
	h := newHarnessOn(t, db, worker, Config{LeaseTTL: 2 * time.Second}, func(s *Stack) {
		s.Register(TaskConfig{Type: "cut"}, func(ctx context.Context, j *Job) error {
			if j.Attempt > 1 {
				return nil
			}
			close(started)
			<-ctx.Done()
			cause.Store(context.Cause(ctx))
			<-reconnected
			return ctx.Err()
		})
	})
	id := h.enqueue(Spec{Type: "cut", Resource: "r"})
	<-started
	px.Block()
	eventually(t, 5*time.Second, "the handler saw its lease lost", func() bool { return cause.Load() != nil })
	px.Unblock()
	close(reconnected)
	if err, _ := cause.Load().(error); !errors.Is(err, locking.ErrRenewFailed) || !errors.Is(err, locking.ErrLeaseLost) {
		t.Fatalf("cause %v", cause.Load())
	}
	v := h.waitStatus(id, "done", 20*time.Second)
	var renewFailed, lost *Event
	for i, e := range v.Timeline {
		switch e.Event {
		case "lease_renew_failed":
			renewFailed = &v.Timeline[i]
		case "lease_lost":
			lost = &v.Timeline[i]
		}
	}
	if renewFailed == nil || lost == nil {
		t.Fatalf("timeline %v", events(v))
	}
	final, _ := strconv.ParseInt(v.Raw["fencing_token"], 10, 64)
	if lost.Token != 1 || lost.Delivery != id+".d1" || lost.Attempt != 1 || !strings.Contains(lost.Detail, "renewal failed") ||
		renewFailed.Token != 1 || final <= lost.Token {
		t.Fatalf("lease events %+v %+v, final token %d", *renewFailed, *lost, final)
	}
}

// Handlers that ignore their context outlive asynq's timeout as zombies; the process still never
// runs more than its concurrency, and counts them.
func TestConcurrencyBoundIncludesZombies(t *testing.T) {
	t.Parallel()
	var now, peak atomic.Int32
	release := make(chan struct{})
	h := newHarness(t, Config{Concurrency: 2, SlotWait: 200 * time.Millisecond}, func(s *Stack) {
		s.Register(TaskConfig{Type: "stubborn", Timeout: time.Second, MaxAttempts: 20}, func(ctx context.Context, j *Job) error {
			n := now.Add(1)
			defer now.Add(-1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			<-release // ignores ctx
			return nil
		})
	})
	var ids []string
	for i := 0; i < 6; i++ {
		ids = append(ids, h.enqueue(Spec{Type: "stubborn", Resource: fmt.Sprint("r", i)}))
	}
	eventually(t, 10*time.Second, "zombies appear, in the gauge too", func() bool {
		return h.stack.Zombies() > 0 && testutil.ToFloat64(h.stack.m.zombie) > 0
	})
	eventually(t, 10*time.Second, "no-slot bounces", func() bool {
		return testutil.ToFloat64(h.stack.m.bounces.WithLabelValues("stubborn", "no_slot")) > 0
	})
	if peak.Load() > 2 || h.stack.Running() > 2 {
		t.Fatalf("peak %d running handlers, %d now; concurrency is 2", peak.Load(), h.stack.Running())
	}
	close(release)
	for _, id := range ids {
		h.waitStatus(id, "done", 30*time.Second)
	}
	if peak.Load() > 2 {
		t.Fatalf("peak %d", peak.Load())
	}
}

func TestShutdownRequeuesAndGivesTheAttemptBack(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "long"}, func(ctx context.Context, j *Job) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		})
	})
	id := h.enqueue(Spec{Type: "long", Resource: "r"})
	<-started
	h.stop()
	v, _ := h.stack.Get(bg, id)
	if v.Raw["status"] != "queued" || v.Raw["attempt"] != "0" || !has(v, "requeued") || v.Lease.Owner != "" {
		t.Fatalf("after shutdown: %v %v lease %+v", v.Record, events(v), v.Lease)
	}
	info, err := h.insp.GetTaskInfo("default", DeliveryID(id, 1))
	if err != nil || (info.State != asynq.TaskStatePending && info.State != asynq.TaskStateRetry) {
		t.Fatalf("the delivery is not waiting to run again: %+v %v", info, err)
	}
}

func TestEnqueueFailureLeavesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "x"}, func(ctx context.Context, j *Job) error { return nil })
	})
	ours := func() int { return len(h.rdb.Keys(bg, "jobguard:*").Val()) }
	before := ours()
	// A closed client fails every enqueue, after the record was written.
	broken := asynq.NewClient(asynq.RedisClientOpt{Addr: "127.0.0.1:1"})
	_ = broken.Close()
	if _, err := h.stack.Enqueue(bg, broken, Spec{Type: "x", Resource: "r"}); err == nil {
		t.Fatal("enqueue through a closed client succeeded")
	}
	if after := ours(); after != before {
		t.Fatalf("%d keys before, %d after a failed enqueue", before, after)
	}
	if _, err := h.stack.Enqueue(bg, h.client, Spec{Type: "nope"}); !errors.Is(err, ErrUnknownType) {
		t.Fatalf("unknown type: %v", err)
	}
}

// While a handler runs, each lease renewal stamps heartbeat_at in the job record.
func TestHeartbeatWhileRunning(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	h := newHarness(t, Config{LeaseTTL: 2 * time.Second}, func(s *Stack) {
		s.Register(TaskConfig{Type: "long"}, func(ctx context.Context, j *Job) error { <-release; return nil })
	})
	id := h.enqueue(Spec{Type: "long", Resource: "r"})
	h.waitStatus(id, "processing", 10*time.Second)
	eventually(t, 5*time.Second, "a heartbeat after the start", func() bool {
		v, _ := h.stack.Get(bg, id)
		return v.Raw["heartbeat_at"] > v.Raw["started_at"]
	})
	close(release)
	h.waitStatus(id, "done", 10*time.Second)
}
