package middleware_test

// An adversarial review's findings on the lease level: each test failed on the code as reviewed
// (before the continuation rules, the last-retry hand-off, the trusted headers, the panic-safe
// Resource and OpKey, the bounded applied records, the 90-day superseded marker and the TTL floor).

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

	"github.com/jobguard/jobguard/middleware"
)

// slowCommitHook delays every lease_rescue call in commit mode: the rescuer's process pauses (GC,
// a slow link) between enqueueing the copy and committing the rescue.
type slowCommitHook struct{ delay time.Duration }

func (slowCommitHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h slowCommitHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 5 && strings.HasPrefix(strings.ToLower(fmt.Sprint(args[0])), "eval") && args[5] == "commit" {
			time.Sleep(h.delay)
		}
		return next(ctx, cmd)
	}
}

func (slowCommitHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// FINDING 1 (task lost). The rescuer enqueues the copy before it commits the rescue. A copy that
// asynq delivers before the commit finds its original still "running:" and is acknowledged as a
// stale copy without running; the commit then marks the original superseded, so the original's
// own end (or asynq's redelivery of it) is acknowledged without running too. Nothing runs the task.
func TestReviewRescueCopyDeliveredBeforeCommitIsNotLost(t *testing.T) {
	t.Parallel()
	b := setup(t, middleware.Config{LeaseTTL: time.Second})
	b.guard.ProtectLease("reserve", middleware.Lease{Resource: skuOf})
	var runs, succeeded atomic.Int64
	firstStarted, firstGoOn := make(chan struct{}, 1), make(chan struct{})
	b.serve(t, asynq.Config{Concurrency: 2}, map[string]asynq.HandlerFunc{"reserve": func(ctx context.Context, task *asynq.Task) error {
		if runs.Add(1) == 1 {
			firstStarted <- struct{}{}
			<-firstGoOn // paused (or dead) past its lease
			// On resumption it finds its lease lost and gives up, as a handler that watches ctx does.
			return context.Cause(ctx)
		}
		succeeded.Add(1)
		return nil
	}})
	if _, err := b.client.Enqueue(asynq.NewTask("reserve", []byte("7")), asynq.Retention(time.Hour)); err != nil {
		t.Fatal(err)
	}
	<-firstStarted
	b.rdb.Del(ctx, b.guard.Locks().LeaseKey("sku:7"))

	// The rescuer runs in another process whose commit comes 3 s after its enqueue.
	slow := redis.NewClient(b.rdb.Options())
	slow.AddHook(slowCommitHook{delay: 3 * time.Second})
	rescuer := middleware.New(slow, middleware.Config{Prefix: "t", LeaseTTL: time.Second})
	rescuer.ProtectLease("reserve", middleware.Lease{Resource: skuOf})
	t.Cleanup(func() { _ = rescuer.Close(); _ = slow.Close() })
	eventually(t, 15*time.Second, "the lost run rescued", func() bool {
		n, _ := rescuer.RescueLeases(ctx, b.insp)
		return n == 1
	})
	close(firstGoOn)
	eventually(t, 15*time.Second, "the task's work done by some run (runs so far: see below)", func() bool {
		if succeeded.Load() == 1 {
			return true
		}
		if b.completed(t, "default") == 2 && succeeded.Load() == 0 {
			t.Fatalf("original and copy both acknowledged, %d handler runs, none succeeded: the task is lost", runs.Load())
		}
		return false
	})
}

// FINDING 2 (task lost, op keys collide). jobguard trusts its rescue headers on any task: a task
// whose producer copied the headers of a task it received (a follow-up re-enqueued with
// t.Headers(), a tracing middleware that propagates headers) or that forges them is treated as a
// rescue's copy that lost its race and acknowledged without ever running.
func TestReviewTaskCarryingCopiedRescueHeadersRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, middleware.Config{})
	b.guard.ProtectLease("reserve", middleware.Lease{Resource: skuOf})
	var runs atomic.Int64
	b.serve(t, asynq.Config{Concurrency: 2}, map[string]asynq.HandlerFunc{"reserve": func(ctx context.Context, task *asynq.Task) error {
		runs.Add(1)
		return nil
	}})
	// The headers a rescue's copy carries, copied onto a new task with a fresh id.
	headers := map[string]string{"jobguard-rescue-of": "a1b2", "jobguard-op-root": "a1b2", "traceparent": "00-abc-def-01"}
	if _, err := b.client.Enqueue(asynq.NewTaskWithHeaders("reserve", []byte("8"), headers), asynq.Retention(time.Hour)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the task acknowledged", func() bool { return b.completed(t, "default") == 1 })
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d handler runs, want 1: the task was acknowledged without running", n)
	}
}

// FINDING 2b. The op-root header is trusted too: a task carrying another task's id there shares
// its op key, and its Run.Apply is refused as already applied (the effect silently skipped).
func TestReviewForgedOpRootDoesNotShareAnotherTasksOpKey(t *testing.T) {
	t.Parallel()
	b := setup(t, middleware.Config{})
	b.guard.ProtectLease("reserve", middleware.Lease{Resource: skuOf})
	effect := middleware.NewEffect(`return redis.call('HINCRBY', KEYS[1], 'reserved', ARGV[5])`)
	applyErrs := make(chan error, 2)
	b.serve(t, asynq.Config{Concurrency: 1}, map[string]asynq.HandlerFunc{"reserve": func(ctx context.Context, task *asynq.Task) error {
		run, _ := middleware.RunFrom(ctx)
		_, err := run.Apply(ctx, effect, run.Key("stock"), nil, 1)
		applyErrs <- err
		return nil
	}})
	if _, err := b.client.Enqueue(asynq.NewTask("reserve", []byte("9")), asynq.TaskID("order-1")); err != nil {
		t.Fatal(err)
	}
	if err := <-applyErrs; err != nil {
		t.Fatal(err)
	}
	// A second, different order whose headers name the first's id as the op root.
	forged := asynq.NewTaskWithHeaders("reserve", []byte("9"), map[string]string{"jobguard-op-root": "order-1"})
	if _, err := b.client.Enqueue(forged, asynq.TaskID("order-2")); err != nil {
		t.Fatal(err)
	}
	if err := <-applyErrs; err != nil {
		t.Fatalf("order-2's Apply: %v, want it applied (its own op key)", err)
	}
}

// FINDING 3 (process crash). The rescuer calls every protected type's Resource on every active
// task of every queue, in every process, with no recover: a Resource that panics on some payload
// (here: another version's Resource during a rolling deploy, reading a payload it does not know)
// panics Guard.Run's goroutine, which ends the whole worker process, on every process at once.
func TestReviewRescuerSurvivesAResourceThatPanics(t *testing.T) {
	t.Parallel()
	b := setup(t, middleware.Config{})
	b.guard.ProtectLease("reserve", middleware.Lease{Resource: skuOf})
	started, goOn := make(chan struct{}, 1), make(chan struct{})
	b.serve(t, asynq.Config{Concurrency: 1}, map[string]asynq.HandlerFunc{"reserve": func(ctx context.Context, task *asynq.Task) error {
		started <- struct{}{}
		<-goOn
		return nil
	}})
	t.Cleanup(func() { close(goOn) })
	if _, err := b.client.Enqueue(asynq.NewTask("reserve", []byte("10"))); err != nil {
		t.Fatal(err)
	}
	<-started
	// The next version's Resource expects a JSON payload and indexes into it.
	other := middleware.New(b.rdb, middleware.Config{Prefix: "t"})
	t.Cleanup(func() { _ = other.Close() })
	other.ProtectLease("reserve", middleware.Lease{Resource: func(t *asynq.Task) (string, error) {
		var fields []string
		if t.Payload()[0] == '{' {
			fields = strings.Split(string(t.Payload()), ",")
		}
		return "sku:" + fields[0], nil // index out of range on the old payload
	}})
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("RescueLeases panicked (Guard.Run would take the process down): %v", p)
		}
	}()
	if _, err := other.RescueLeases(ctx, b.insp); err != nil {
		t.Fatal(err)
	}
}

// FINDING 4 (a bounce counted as a failure). A run whose lease was lost (a Redis failover, a
// pause) returns a lease_lost bounce, but on a task's last retry asynq archives before it asks
// IsFailure: a task enqueued with MaxRetry(0) (or on its last retry) goes to the dead letter
// although it never failed. The in-process wait covers only the "held" bounce at start; the
// start_failed and lease_lost bounces, and RetryAfter, have the same hole.
func TestReviewLeaseLostOnLastRetryIsNotArchived(t *testing.T) {
	t.Parallel()
	b := setup(t, middleware.Config{LeaseTTL: time.Second})
	b.guard.ProtectLease("reserve", middleware.Lease{Resource: skuOf})
	var runs, succeeded atomic.Int64
	b.serve(t, asynq.Config{Concurrency: 1}, map[string]asynq.HandlerFunc{"reserve": func(ctx context.Context, task *asynq.Task) error {
		if runs.Add(1) == 1 {
			<-ctx.Done() // the lease goes (below); the handler stops, as it should
			return context.Cause(ctx)
		}
		succeeded.Add(1)
		return nil
	}})
	if _, err := b.client.Enqueue(asynq.NewTask("reserve", []byte("11")), asynq.MaxRetry(0), asynq.Retention(time.Hour)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the first run started", func() bool { return runs.Load() == 1 })
	b.rdb.Del(ctx, b.guard.Locks().LeaseKey("sku:11")) // the lease lost (failover to a replica that lacks it)
	eventually(t, 15*time.Second, "the task run again and done", func() bool {
		if arch, _ := b.insp.ListArchivedTasks("default"); len(arch) == 1 {
			t.Fatalf("archived after a lease_lost bounce (%s): a bounce counted as a failure", arch[0].LastErr)
		}
		return succeeded.Load() == 1
	})
}

// FINDING 5 (memory per finished task). With the defaults (op key = the task id, AppliedTTL 0),
// every lease-level task that calls Run.Apply leaves an applied-operation record that never
// expires, though no delivery can present that task id once the task is gone: Redis grows by one
// key per task for ever, even with FenceTTL set.
func TestReviewApplyLeavesNothingWithoutAnExpiryPerFinishedTask(t *testing.T) {
	t.Parallel()
	b := setup(t, middleware.Config{})
	b.guard.ProtectLease("once", middleware.Lease{Resource: skuOf, FenceTTL: time.Hour})
	effect := middleware.NewEffect(`return redis.call('HINCRBY', KEYS[1], 'n', 1)`)
	var done atomic.Int64
	b.serve(t, asynq.Config{Concurrency: 4}, map[string]asynq.HandlerFunc{"once": func(ctx context.Context, task *asynq.Task) error {
		run, _ := middleware.RunFrom(ctx)
		if _, err := run.Apply(ctx, effect, run.Key("stock"), nil); err != nil && !errors.Is(err, middleware.ErrAlreadyApplied) {
			return err
		}
		done.Add(1)
		return nil
	}})
	for i := range 10 {
		if _, err := b.client.Enqueue(asynq.NewTask("once", []byte(fmt.Sprint(i)))); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 15*time.Second, "10 tasks done", func() bool { return done.Load() == 10 })
	time.Sleep(200 * time.Millisecond)
	var forever []string
	for _, k := range b.rdb.Keys(ctx, "t:*:applied:*").Val() {
		if b.rdb.PTTL(ctx, k).Val() < 0 {
			forever = append(forever, k)
		}
	}
	if len(forever) > 0 {
		t.Fatalf("%d applied-operation records of finished tasks never expire, e.g. %s", len(forever), forever[0])
	}
}

// FINDING 6 (run again after it completed). The superseded marker that makes asynq's later
// redelivery of a rescued original a no-op lives 24 h, but the original comes back when asynq's
// recoverer retries it after the application's RetryDelayFunc (asynq's default waits n^4 s: more
// than 24 h from the 18th retry on) or when an operator runs the archived original (asynq keeps
// the archive 90 days): past 24 h the original runs again, although its copy completed.
func TestReviewSupersededMarkerOutlivesTheOriginalsComeback(t *testing.T) {
	t.Parallel()
	b := setup(t, middleware.Config{LeaseTTL: time.Second})
	b.guard.ProtectLease("reserve", middleware.Lease{Resource: skuOf})
	const appRetryDelay = 48 * time.Hour // the application backs off two days after a lost worker
	firstStarted, firstGoOn := make(chan struct{}, 1), make(chan struct{})
	var runs atomic.Int64
	b.serve(t, asynq.Config{Concurrency: 2, RetryDelayFunc: func(int, error, *asynq.Task) time.Duration { return appRetryDelay }},
		map[string]asynq.HandlerFunc{"reserve": func(ctx context.Context, task *asynq.Task) error {
			if runs.Add(1) == 1 {
				firstStarted <- struct{}{}
				<-firstGoOn
			}
			return nil
		}})
	t.Cleanup(func() { close(firstGoOn) })
	info, err := b.client.Enqueue(asynq.NewTask("reserve", []byte("12")))
	if err != nil {
		t.Fatal(err)
	}
	<-firstStarted
	b.rdb.Del(ctx, b.guard.Locks().LeaseKey("sku:12"))
	eventually(t, 10*time.Second, "the lost run rescued", func() bool {
		n, _ := b.guard.RescueLeases(ctx, b.insp)
		return n == 1
	})
	marker := b.guard.Locks().Key("sku:12", "run:"+info.ID)
	if !strings.HasPrefix(b.rdb.Get(ctx, marker).Val(), "superseded:") {
		t.Fatalf("marker %q, want superseded", b.rdb.Get(ctx, marker).Val())
	}
	if ttl := b.rdb.PTTL(ctx, marker).Val(); ttl < appRetryDelay {
		t.Fatalf("superseded marker expires in %v, before the original's retry comes back (%v): it would run again", ttl.Round(time.Hour), appRetryDelay)
	}
}

// FINDING 7 (resource blocked for a lease TTL). Lease.OpKey is called after lease_start took the
// lease and wrote the run marker, but before the deferred recover/finish is in place: an OpKey
// that panics (asynq's recoverer turns it into an error) leaves the lease held with nothing
// renewing or releasing it, and every task of the resource bounces until the lease TTL lapses.
func TestReviewOpKeyPanicDoesNotHoldTheResource(t *testing.T) {
	t.Parallel()
	b := setup(t, middleware.Config{LeaseTTL: 20 * time.Second})
	var calls atomic.Int64
	b.guard.ProtectLease("reserve", middleware.Lease{Resource: func(t *asynq.Task) (string, error) { return "sku:13", nil },
		OpKey: func(t *asynq.Task) string {
			if string(t.Payload()) == "bad" && calls.Add(1) == 1 {
				panic("a bug in the application's OpKey")
			}
			return string(t.Payload())
		}})
	var good atomic.Int64
	b.serve(t, asynq.Config{Concurrency: 2}, map[string]asynq.HandlerFunc{"reserve": func(ctx context.Context, task *asynq.Task) error {
		if string(task.Payload()) == "good" {
			good.Add(1)
		}
		return nil
	}})
	if _, err := b.client.Enqueue(asynq.NewTask("reserve", []byte("bad"))); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the OpKey panicked", func() bool { return calls.Load() >= 1 })
	if _, err := b.client.Enqueue(asynq.NewTask("reserve", []byte("good"))); err != nil {
		t.Fatal(err)
	}
	eventually(t, 8*time.Second, "another task of the resource ran (the lease was left held for its 20 s TTL)", func() bool { return good.Load() == 1 })
}

// FINDING 8 (wiring mistake not found at start). A Lease.TTL under a millisecond (a unit slip:
// time.Duration(500) meant as ms) is sent as PX 0, which Redis refuses: every delivery bounces
// as start_failed for ever (and is archived on its last retry). ProtectLease panics on the other
// wiring mistakes; it accepts this one.
func TestReviewSubMillisecondLeaseTTLIsRefusedOrRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, middleware.Config{})
	refused := func() (refused bool) {
		defer func() { refused = recover() != nil }()
		b.guard.ProtectLease("reserve", middleware.Lease{Resource: skuOf, TTL: 500}) // 500 ns
		return false
	}()
	if refused {
		return
	}
	var runs atomic.Int64
	b.serve(t, asynq.Config{Concurrency: 1}, map[string]asynq.HandlerFunc{"reserve": func(ctx context.Context, task *asynq.Task) error {
		runs.Add(1)
		return nil
	}})
	if _, err := b.client.Enqueue(asynq.NewTask("reserve", []byte("14"))); err != nil {
		t.Fatal(err)
	}
	eventually(t, 6*time.Second, "the task ran (ProtectLease accepted a 500 ns TTL)", func() bool { return runs.Load() == 1 })
}
