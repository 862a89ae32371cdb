package engine

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/faultproxy"
)

// enqueueMany sends n identical requests at once and returns the distinct job ids and how many
// were deduplicated.
func enqueueMany(t *testing.T, h *harness, n int, spec Spec) (map[string]bool, int) {
	t.Helper()
	var mu sync.Mutex
	ids := map[string]bool{}
	dups := 0
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, err := h.stack.Enqueue(bg, h.client, spec)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			ids[e.JobID] = true
			if e.Deduplicated {
				dups++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return ids, dups
}

func one(ids map[string]bool) string {
	for id := range ids {
		return id
	}
	return ""
}

func TestUntilStartedQueuesExactlyOneFollowUp(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	var runs atomic.Int32
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "rebuild"}, func(ctx context.Context, j *Job) error {
			if runs.Add(1) == 1 {
				<-gate
			}
			return nil
		})
	})
	spec := Spec{Type: "rebuild", Resource: "t:r", Dedup: &Dedup{Policy: UntilStarted, Key: "rebuild"}}
	// The resource is busy, so nothing starts: 50 requests are one job.
	holder, _ := h.stack.locks.TryAcquire(bg, ResourceTag("t:r"), time.Minute)
	ids, dups := enqueueMany(t, h, 50, spec)
	if len(ids) != 1 || dups != 49 {
		t.Fatalf("%d jobs, %d deduplicated", len(ids), dups)
	}
	first := one(ids)
	_ = holder.Release(bg)
	h.waitStatus(first, "processing", 10*time.Second)
	// Requests while it runs: exactly one follow-up, which collapses the rest.
	ids, dups = enqueueMany(t, h, 20, spec)
	if len(ids) != 1 || dups != 19 || ids[first] {
		t.Fatalf("while running: %d jobs (first among them: %v), %d deduplicated", len(ids), ids[first], dups)
	}
	follow := one(ids)
	close(gate)
	h.waitStatus(first, "done", 10*time.Second)
	h.waitStatus(follow, "done", 10*time.Second)
	v, _ := h.stack.Get(bg, first)
	n := 0
	for _, e := range v.Timeline {
		if e.Event == "deduplicated" {
			n++
		}
	}
	if n != 49 || h.stack.Stats.Deduplicated.Load() != 68 {
		t.Fatalf("%d deduplicated events on the first job, %d counted", n, h.stack.Stats.Deduplicated.Load())
	}
}

func TestUntilDoneCollapsesUntilTerminal(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "order"}, func(ctx context.Context, j *Job) error { <-gate; return nil })
	})
	spec := Spec{Type: "order", Resource: "t:sku", Dedup: &Dedup{Policy: UntilDone, Key: "order-1"}}
	a, _ := h.stack.Enqueue(bg, h.client, spec)
	h.waitStatus(a.JobID, "processing", 10*time.Second)
	b, _ := h.stack.Enqueue(bg, h.client, spec)
	if b.JobID != a.JobID || !b.Deduplicated {
		t.Fatalf("while running: %+v vs %s", b, a.JobID)
	}
	close(gate)
	h.waitStatus(a.JobID, "done", 10*time.Second)
	c, _ := h.stack.Enqueue(bg, h.client, spec)
	if c.JobID == a.JobID || c.Deduplicated {
		t.Fatalf("after done: %+v", c)
	}
	h.waitStatus(c.JobID, "done", 10*time.Second)
}

func TestThrottleOnePerWindow(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "ping"}, func(ctx context.Context, j *Job) error { return nil })
	})
	spec := Spec{Type: "ping", Resource: "t:x", Dedup: &Dedup{Policy: Throttle, Key: "ping", TTL: 2 * time.Second}}
	a, _ := h.stack.Enqueue(bg, h.client, spec)
	b, _ := h.stack.Enqueue(bg, h.client, spec)
	if b.JobID != a.JobID || !b.Deduplicated {
		t.Fatalf("inside the window: %+v", b)
	}
	h.waitStatus(a.JobID, "done", 10*time.Second)
	var c Enqueued
	eventually(t, 5*time.Second, "a new job once the window passed", func() bool {
		c, _ = h.stack.Enqueue(bg, h.client, spec)
		return !c.Deduplicated
	})
	if c.JobID == a.JobID {
		t.Fatal("same job after the window")
	}
}

// The debounce runs on the engine's clock from the last replace: the job's first delivery (due
// after one debounce from the enqueue) bounces while the clock says the last replace was less than
// a debounce ago, and runs the newest payload once the clock has moved on.
func TestReplaceRunsTheNewestPayloadAfterTheDebounce(t *testing.T) {
	t.Parallel()
	const debounce = 300 * time.Millisecond
	clock := newFakeClock()
	var ran atomic.Value
	var runs atomic.Int32
	h := newHarness(t, Config{Clock: clock}, func(s *Stack) {
		s.Register(TaskConfig{Type: "sync"}, func(ctx context.Context, j *Job) error {
			runs.Add(1)
			ran.Store(string(j.Payload))
			return nil
		})
	})
	spec := func(p string) Spec {
		return Spec{Type: "sync", Resource: "t:doc", Payload: []byte(p),
			Dedup: &Dedup{Policy: Replace, Key: "sync", Debounce: debounce}}
	}
	a, _ := h.stack.Enqueue(bg, h.client, spec("v1"))
	for i := 2; i <= 4; i++ {
		clock.Advance(debounce / 2)
		e, err := h.stack.Enqueue(bg, h.client, spec("v"+strconv.Itoa(i)))
		if err != nil || e.JobID != a.JobID || !e.Deduplicated {
			t.Fatalf("replace %d: %+v %v", i, e, err)
		}
	}
	last := clock.Now()
	eventually(t, 10*time.Second, "the first delivery bounces on the debounce", func() bool {
		return testutil.ToFloat64(h.stack.m.bounces.WithLabelValues("sync", "debounce")) > 0
	})
	if runs.Load() != 0 {
		t.Fatalf("ran %d times inside the debounce", runs.Load())
	}
	clock.Advance(debounce)
	v := h.waitStatus(a.JobID, "done", 15*time.Second)
	if ran.Load() != "v4" || runs.Load() != 1 {
		t.Fatalf("ran %d times, last with %v", runs.Load(), ran.Load())
	}
	started, _ := strconv.ParseInt(v.Raw["started_at"], 10, 64)
	if started < last.Add(debounce).UnixMilli() {
		t.Fatalf("started %d ms after the last replace; the debounce is %s", started-last.UnixMilli(), debounce)
	}
	if !has(v, "replaced") || h.stack.Stats.Replaced.Load() != 3 {
		t.Fatalf("timeline %v, replaced %d", events(v), h.stack.Stats.Replaced.Load())
	}
}

func TestReplayAFailedJob(t *testing.T) {
	t.Parallel()
	var healthy atomic.Bool
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "fragile", MaxAttempts: 1}, func(ctx context.Context, j *Job) error {
			if !healthy.Load() {
				return errors.New("dependency down")
			}
			return nil
		})
	})
	id := h.enqueue(Spec{Type: "fragile", Resource: "r"})
	h.waitStatus(id, "failed", 10*time.Second)
	if _, err := h.stack.Replay(bg, h.client, id); err != nil {
		t.Fatal(err) // still failing: it fails again
	}
	v := h.waitStatus(id, "failed", 10*time.Second)
	if v.Raw["deliveries"] != "2" || v.Raw["delivery"] != DeliveryID(id, 2) {
		t.Fatalf("after the first replay: %v", v.Record)
	}
	// A replay whose enqueue fails goes back to failed as it was.
	broken := asynq.NewClient(asynq.RedisClientOpt{Addr: "127.0.0.1:1"})
	_ = broken.Close()
	if _, err := h.stack.Replay(bg, broken, id); err == nil {
		t.Fatal("replay through a closed client succeeded")
	}
	v, _ = h.stack.Get(bg, id)
	if v.Raw["status"] != "failed" || v.Raw["delivery"] != DeliveryID(id, 2) || v.Raw["deliveries"] != "2" || v.Raw["attempt"] != "1" {
		t.Fatalf("after a failed replay: %v", v.Record)
	}
	healthy.Store(true)
	if _, err := h.stack.Replay(bg, h.client, id); err != nil {
		t.Fatal(err)
	}
	v = h.waitStatus(id, "done", 10*time.Second)
	if v.Raw["attempt"] != "1" || v.Raw["delivery"] != DeliveryID(id, 3) || !has(v, "replayed") {
		t.Fatalf("after the second replay: %v %v", v.Record, events(v))
	}
	if _, err := h.stack.Replay(bg, h.client, id); !errors.Is(err, ErrNotFailed) {
		t.Fatalf("replay of a done job: %v", err)
	}
	if _, err := h.stack.Replay(bg, h.client, NewJobID("nothing", time.Now())); !errors.Is(err, ErrJobNotFound) {
		t.Fatalf("replay of an unknown job: %v", err)
	}
}

func TestFailedEnqueueRemovesTheDedupMarker(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "x"}, func(ctx context.Context, j *Job) error { return nil })
	})
	broken := asynq.NewClient(asynq.RedisClientOpt{Addr: "127.0.0.1:1"})
	_ = broken.Close()
	spec := Spec{Type: "x", Resource: "r", Dedup: &Dedup{Policy: UntilDone, Key: "k"}}
	if _, err := h.stack.Enqueue(bg, broken, spec); err == nil {
		t.Fatal("enqueue through a closed client succeeded")
	}
	if keys := h.rdb.Keys(bg, "jobguard:*").Val(); len(keys) != 0 {
		t.Fatalf("left behind: %v", keys)
	}
	e, err := h.stack.Enqueue(bg, h.client, spec)
	if err != nil || e.Deduplicated {
		t.Fatalf("the next request is not a new job: %+v %v", e, err)
	}
}

// A duplicate that arrives while the first job's enqueue is still in flight waits for it: when
// asynq then refuses that job and it is abandoned, the duplicate becomes a job of its own instead
// of being answered with the id of a job that never existed.
func TestDuplicateWaitsForAPendingJob(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "x"}, func(ctx context.Context, j *Job) error { return nil })
	})
	// The duplicate comes from another process, whose clock only it reads; the clock stands still,
	// so its pendingWait never runs out here.
	clock := newFakeClock()
	dup := New(h.rdb, Config{Clock: clock})
	dup.Register(TaskConfig{Type: "x"}, func(ctx context.Context, j *Job) error { return nil })
	defer dup.Close()
	px, err := faultproxy.New(h.rdb.Options().Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	// No read deadline and a latency no run outlasts: the first enqueue's answer can only be cut by
	// the Block below, never arrive first (with 1 s it arrived first on a loaded CI machine, whose
	// duplicate took longer to start polling).
	slow := redis.NewClient(&redis.Options{Addr: px.Addr(), DB: h.rdb.Options().DB, MaxRetries: -1, DialerRetries: 1, ReadTimeout: -1})
	defer slow.Close()
	px.SetLatency(time.Minute)
	spec := Spec{Type: "x", Resource: "r", Dedup: &Dedup{Policy: UntilStarted, Key: "k"}}

	first := make(chan error, 1)
	go func() {
		_, err := h.stack.Enqueue(bg, asynq.NewClientFromRedisClient(slow), spec)
		first <- err
	}()
	keys := must(h.stack.keysFor(NewJobID("r", time.Now()), "", "until_started:k"))
	eventually(t, 5*time.Second, "the first job's marker is written", func() bool { return h.rdb.Exists(bg, keys.Marker).Val() == 1 })
	second := make(chan Enqueued, 1)
	reads := clock.Reads()
	go func() {
		e, err := dup.Enqueue(bg, h.client, spec)
		if err != nil {
			t.Error(err)
		}
		second <- e
	}()
	// Enqueue reads the clock once, awaitConfirmation once to set its deadline and once per poll.
	eventually(t, 5*time.Second, "the duplicate polls the first job's confirmation", func() bool { return clock.Reads() >= reads+3 })
	px.Block() // the fault: asynq's answer to the first enqueue never comes
	if err := <-first; err == nil {
		t.Fatal("the first enqueue succeeded through a cut connection")
	}
	e := <-second
	if e.Deduplicated || e.JobID == "" {
		t.Fatalf("the duplicate was answered with the abandoned job: %+v", e)
	}
	v := h.waitStatus(e.JobID, "done", 10*time.Second)
	if records := h.rdb.Keys(bg, "jobguard:*:job:*").Val(); len(records) != 1 { // its record (its timeline folded)
		t.Fatalf("keys after the abandoned job: %v (job %v)", records, v.Record)
	}
}

// A duplicate of a job whose enqueuer died between create and confirm gets ErrDedupPending after
// pendingWait, never that job's id; once the claim expires, a request creates a job again.
func TestDuplicateOfAnUnconfirmedJobIsRefused(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	h := newHarness(t, Config{Clock: clock}, func(s *Stack) {
		s.Register(TaskConfig{Type: "x"}, func(ctx context.Context, j *Job) error { return nil })
	})
	spec := Spec{Type: "x", Resource: "r", Dedup: &Dedup{Policy: UntilDone, Key: "k"}}
	keys := must(h.stack.keysFor(NewJobID("r", time.Now()), "", "until_done:k"))
	// What a dead enqueuer leaves: its claim, still pending (for longer than the wait below takes).
	dead := NewJobID("r", time.Now())
	h.rdb.Set(bg, keys.Marker, dead, 1500*time.Millisecond)
	h.rdb.Set(bg, keys.Pending, dead, 1500*time.Millisecond)
	refused := make(chan error, 1)
	begun := clock.Now()
	go func() {
		_, err := h.stack.Enqueue(bg, h.client, spec)
		refused <- err
	}()
	// The duplicate waits pendingWait on the engine's clock: move it until the answer comes.
	var err error
	for waiting := true; waiting; {
		select {
		case err = <-refused:
			waiting = false
		case <-time.After(10 * time.Millisecond):
			clock.Advance(100 * time.Millisecond)
		}
	}
	if !errors.Is(err, ErrDedupPending) {
		t.Fatalf("duplicate of an unconfirmed job: %v", err)
	}
	if waited := clock.Now().Sub(begun); waited < pendingWait {
		t.Fatalf("refused after %s on the clock; the wait is %s", waited, pendingWait)
	}
	eventually(t, 5*time.Second, "the claim expired", func() bool { return h.rdb.Exists(bg, keys.Marker).Val() == 0 })
	e, err := h.stack.Enqueue(bg, h.client, spec)
	if err != nil || e.Deduplicated {
		t.Fatalf("after the claim: %+v %v", e, err)
	}
	h.waitStatus(e.JobID, "done", 10*time.Second)
	if h.rdb.Exists(bg, keys.Pending).Val() != 0 {
		t.Fatal("the confirmed job's pending flag is still there")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
