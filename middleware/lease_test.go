package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/locking"
	"github.com/jobguard/jobguard/middleware"
)

func skuOf(t *asynq.Task) (string, error) { return "sku:" + string(t.Payload()), nil }

// Two servers, three resources, thirty tasks, half of which allow no retry: never two runs of one
// resource at once, and every task done (a delivery that found its resource held bounced without
// failing, or, with no retry left, waited for the lease).
func TestLeaseLevelRunsOneTaskPerResourceAtATime(t *testing.T) {
	t.Parallel()
	b := setup(t, middleware.Config{})
	b.guard.ProtectLease("reserve", middleware.Lease{Resource: skuOf})
	var mu sync.Mutex
	inFlight, most := map[string]int{}, 0
	var done atomic.Int64
	h := func(ctx context.Context, task *asynq.Task) error {
		sku := string(task.Payload())
		mu.Lock()
		inFlight[sku]++
		most = max(most, inFlight[sku])
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		inFlight[sku]--
		mu.Unlock()
		done.Add(1)
		return nil
	}
	for range 2 {
		b.serve(t, asynq.Config{Concurrency: 5}, map[string]asynq.HandlerFunc{"reserve": h})
	}
	for i := range 30 {
		if _, err := b.client.Enqueue(asynq.NewTask("reserve", []byte(fmt.Sprint(i%3))), asynq.MaxRetry(i%2*3)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, "30 tasks done", func() bool { return done.Load() == 30 })
	mu.Lock()
	defer mu.Unlock()
	if most != 1 {
		t.Fatalf("at most %d runs of one resource at once, want 1", most)
	}
	if n, _ := b.insp.ListArchivedTasks("default"); len(n) != 0 {
		t.Fatalf("%d tasks archived: a bounce counted as a failure", len(n))
	}
}

// A run whose lease lapsed (its renewals stopped, as a paused worker's do) is rescued: a copy runs
// with a higher token and writes; the lost run's write is refused; the effect is applied once;
// asynq's original task ends without a second run.
func TestLeaseLevelRescuesALostRunAndRefusesItsWrites(t *testing.T) {
	t.Parallel()
	b := setup(t, middleware.Config{LeaseTTL: time.Second})
	b.guard.ProtectLease("reserve", middleware.Lease{Resource: skuOf})
	effect := middleware.NewEffect(`return redis.call('HINCRBY', KEYS[1], 'reserved', ARGV[5])`)
	var runs atomic.Int64
	firstStarted, firstGoOn := make(chan *middleware.Run, 1), make(chan struct{})
	staleErr := make(chan error, 1)
	h := func(ctx context.Context, task *asynq.Task) error {
		run, _ := middleware.RunFrom(ctx)
		if runs.Add(1) == 1 {
			firstStarted <- run
			<-firstGoOn // paused past its lease
			staleErr <- run.Locks().SetValue(context.Background(), run.Fence(), run.Key("owner"), "first", 0)
			_, err := run.Apply(context.Background(), effect, run.Key("stock"), nil, 1)
			staleErr <- err
			return nil
		}
		if err := run.Locks().SetValue(ctx, run.Fence(), run.Key("owner"), "copy", 0); err != nil {
			return err
		}
		_, err := run.Apply(ctx, effect, run.Key("stock"), nil, 1)
		return err
	}
	b.serve(t, asynq.Config{Concurrency: 2}, map[string]asynq.HandlerFunc{"reserve": h})
	if _, err := b.client.Enqueue(asynq.NewTask("reserve", []byte("7"))); err != nil {
		t.Fatal(err)
	}
	first := <-firstStarted
	// The pause: its lease goes as if it had expired, and no renewal can bring it back.
	b.rdb.Del(ctx, first.Locks().LeaseKey("sku:7"))
	eventually(t, 10*time.Second, "the lost run rescued", func() bool {
		n, _ := b.guard.RescueLeases(ctx, b.insp)
		return n == 1
	})
	eventually(t, 10*time.Second, "the copy wrote", func() bool { return b.rdb.Get(ctx, "t:{sku:7}:owner").Val() == "copy" })
	close(firstGoOn)
	if err := <-staleErr; !errors.Is(err, locking.ErrStaleToken) {
		t.Fatalf("the lost run's write: %v, want ErrStaleToken", err)
	}
	if err := <-staleErr; !errors.Is(err, locking.ErrStaleToken) {
		t.Fatalf("the lost run's effect: %v, want ErrStaleToken", err)
	}
	eventually(t, 10*time.Second, "both deliveries completed", func() bool { return b.completed(t, "default") == 2 })
	if got := b.rdb.HGet(ctx, "t:{sku:7}:stock", "reserved").Val(); got != "1" {
		t.Fatalf("reserved %s, want 1 (applied once)", got)
	}
	if got := b.rdb.Get(ctx, "t:{sku:7}:owner").Val(); got != "copy" {
		t.Fatalf("owner %q, want the copy's write kept", got)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("%d runs, want 2 (the lost one and its copy)", n)
	}
}

// Permanent archives at once, Revoked drops without archive, RetryAfter waits without failing; an
// error the handler did not mark is the application's retry policy's.
func TestLeaseLevelErrorClasses(t *testing.T) {
	t.Parallel()
	b := setup(t, middleware.Config{})
	b.guard.ProtectLease("work", middleware.Lease{Resource: skuOf})
	var calls sync.Map
	h := func(ctx context.Context, task *asynq.Task) error {
		n, _ := calls.LoadOrStore(string(task.Payload()), new(atomic.Int64))
		switch k := n.(*atomic.Int64).Add(1); string(task.Payload()) {
		case "permanent":
			return middleware.Permanent(errors.New("bad input"))
		case "revoked":
			return middleware.Revoked("not wanted")
		case "later":
			if k == 1 {
				return middleware.RetryAfter(errors.New("429"), time.Second)
			}
		}
		return nil
	}
	var appDelays atomic.Int64
	b.serve(t, asynq.Config{Concurrency: 3, RetryDelayFunc: func(n int, err error, t *asynq.Task) time.Duration {
		appDelays.Add(1)
		return time.Second
	}}, map[string]asynq.HandlerFunc{"work": h})
	for _, p := range []string{"permanent", "revoked", "later"} {
		// A RetryAfter on a task's last retry is a failure to asynq (retries spent): one retry left.
		if _, err := b.client.Enqueue(asynq.NewTask("work", []byte(p)), asynq.MaxRetry(1), asynq.Retention(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 15*time.Second, "permanent archived, later completed", func() bool {
		arch, _ := b.insp.ListArchivedTasks("default")
		done, _ := b.insp.ListCompletedTasks("default")
		return len(arch) == 1 && string(arch[0].Payload) == "permanent" && len(done) == 1 && string(done[0].Payload) == "later"
	})
	eventually(t, 5*time.Second, "revoked gone", func() bool {
		qi, _ := b.insp.GetQueueInfo("default")
		return qi.Size == 2 // the archived and the completed tasks
	})
	if n := appDelays.Load(); n != 0 {
		t.Fatalf("the application's RetryDelayFunc was asked %d times for jobguard's own delays", n)
	}
}

// Finished lease-level runs leave nothing that does not expire: run markers are deleted, and a
// per-task resource's fence counter carries FenceTTL.
func TestLeaseLevelLeavesNothingWithoutAnExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t, middleware.Config{})
	b.guard.ProtectLease("once", middleware.Lease{Resource: skuOf, FenceTTL: time.Hour})
	var done atomic.Int64
	b.serve(t, asynq.Config{Concurrency: 4}, map[string]asynq.HandlerFunc{"once": func(ctx context.Context, task *asynq.Task) error {
		done.Add(1)
		return nil
	}})
	for i := range 20 {
		if _, err := b.client.Enqueue(asynq.NewTask("once", []byte(fmt.Sprint(i)))); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "20 tasks done", func() bool { return done.Load() == 20 })
	eventually(t, 5*time.Second, "every key of jobguard's with a TTL", func() bool {
		keys := b.rdb.Keys(ctx, "t:*").Val()
		for _, k := range keys {
			if b.rdb.PTTL(ctx, k).Val() < 0 {
				return false
			}
		}
		return len(keys) == 20 // the fence counters, expiring
	})
}

// After Redis restarts empty, asynq does not list a queue again in asynq:queues (a process adds
// it on its first enqueue only), so the inspector lists none; a lost run of a queue the server
// serves is rescued all the same (the rescuers walk ServerConfig's queues too).
func TestLeaseLevelRescuesAfterRedisRestartedEmpty(t *testing.T) {
	t.Parallel()
	b := setup(t, middleware.Config{LeaseTTL: time.Second})
	b.guard.ProtectLease("reserve", middleware.Lease{Resource: skuOf})
	var runs atomic.Int64
	firstStarted, firstGoOn := make(chan *middleware.Run, 1), make(chan struct{})
	h := func(ctx context.Context, task *asynq.Task) error {
		run, _ := middleware.RunFrom(ctx)
		if runs.Add(1) == 1 {
			firstStarted <- run
			<-firstGoOn
		}
		return nil
	}
	b.serve(t, asynq.Config{Concurrency: 2, Queues: map[string]int{"critical": 1}}, map[string]asynq.HandlerFunc{"reserve": h})
	if _, err := b.client.Enqueue(asynq.NewTask("warmup", nil), asynq.Queue("critical"), asynq.ProcessIn(time.Hour)); err != nil {
		t.Fatal(err)
	}
	b.rdb.FlushDB(ctx) // the restart: the client has listed its queue and will not again
	if _, err := b.client.Enqueue(asynq.NewTask("reserve", []byte("8")), asynq.Queue("critical")); err != nil {
		t.Fatal(err)
	}
	first := <-firstStarted
	if qs, _ := b.insp.Queues(); len(qs) != 0 {
		t.Fatalf("the inspector lists %v, want none (the premise)", qs)
	}
	b.rdb.Del(ctx, first.Locks().LeaseKey("sku:8")) // its worker is gone
	eventually(t, 10*time.Second, "the lost run rescued", func() bool {
		n, _ := b.guard.RescueLeases(ctx, b.insp)
		return n == 1
	})
	eventually(t, 10*time.Second, "the copy ran", func() bool { return runs.Load() == 2 })
	close(firstGoOn)
}
