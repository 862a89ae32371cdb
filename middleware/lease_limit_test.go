package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/testsupport"
	"github.com/jobguard/jobguard/middleware"
)

// limitKeyOf is the limit key of a "<key>:<n>" payload; taskResource makes every task its own
// resource, so only the limit bounds runs of one key.
func limitKeyOf(t *asynq.Task) string {
	key, _, _ := strings.Cut(string(t.Payload()), ":")
	return key
}

func taskResource(t *asynq.Task) (string, error) { return "task:" + string(t.Payload()), nil }

// Two guards (two processes' limiters) each under a server, three keys, 48 tasks on resources of
// their own, half with no retry: never more than 2 runs of one key at once, and every task done
// (a delivery over the limit bounced without failing or, with no retry left, waited for a slot).
func TestLeaseLimitBoundsRunsPerKeyAcrossServers(t *testing.T) {
	t.Parallel()
	b := setup(t, middleware.Config{})
	other := middleware.New(b.rdb, middleware.Config{Prefix: "t"})
	t.Cleanup(func() { _ = other.Close() })
	lease := middleware.Lease{Resource: taskResource, Limit: middleware.LeaseLimit{Key: limitKeyOf, Concurrency: 2}}
	b.guard.ProtectLease("call", lease)
	other.ProtectLease("call", lease)
	p := testsupport.NewPeaks()
	var done atomic.Int64
	h := func(ctx context.Context, task *asynq.Task) error {
		run, _ := middleware.RunFrom(ctx)
		if run.LimitToken() == 0 {
			t.Error("a limited run without a slot's token")
		}
		p.Enter(limitKeyOf(task))
		time.Sleep(100 * time.Millisecond) // long enough for ten workers to overlap runs of one key
		p.Leave(limitKeyOf(task))
		done.Add(1)
		return nil
	}
	b.serve(t, asynq.Config{Concurrency: 5}, map[string]asynq.HandlerFunc{"call": h})
	b.serveWith(t, other, asynq.Config{Concurrency: 5}, map[string]asynq.HandlerFunc{"call": h})
	const tasks = 48
	for i := range tasks {
		task := asynq.NewTask("call", []byte(fmt.Sprintf("k%d:%d", i%3, i)))
		if _, err := b.client.Enqueue(task, asynq.MaxRetry(i%2*3)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 60*time.Second, "every task done", func() bool { return done.Load() == tasks })
	peaks := p.All()
	for key, most := range peaks {
		if most > 2 {
			t.Fatalf("%d runs of key %s at once, want at most 2", most, key)
		}
	}
	t.Logf("most runs at once per key: %v", peaks)
	if n, _ := b.insp.ListArchivedTasks("default"); len(n) != 0 {
		t.Fatalf("%d tasks archived: a wait for a slot counted as a failure", len(n))
	}
}

// With one slot per key, a run of key a that holds its slot until a run of key b has started
// lets b run (keys do not limit each other), while a second task of a, with no retry left, waits
// for the slot (counted as a full limit) and runs once the first returns.
func TestLeaseLimitKeysDoNotLimitEachOther(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	b := setup(t, middleware.Config{Registerer: reg})
	b.guard.ProtectLease("call", middleware.Lease{Resource: taskResource, Limit: middleware.LeaseLimit{Key: limitKeyOf, Concurrency: 1}})
	firstHolds, bRan := make(chan struct{}), make(chan struct{})
	var started sync.Map
	h := func(ctx context.Context, task *asynq.Task) error {
		started.Store(string(task.Payload()), true)
		switch string(task.Payload()) {
		case "a:1":
			close(firstHolds)
			select {
			case <-bRan:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		case "b:1":
			close(bRan)
		}
		return nil
	}
	b.serve(t, asynq.Config{Concurrency: 4}, map[string]asynq.HandlerFunc{"call": h})
	if _, err := b.client.Enqueue(asynq.NewTask("call", []byte("a:1")), asynq.Retention(time.Hour)); err != nil {
		t.Fatal(err)
	}
	<-firstHolds
	if _, err := b.client.Enqueue(asynq.NewTask("call", []byte("a:2")), asynq.MaxRetry(0), asynq.Retention(time.Hour)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the second task of a found its key full", func() bool {
		return testutil.ToFloat64(metricVec(t, reg, "jobguard_limit_waits_total")) >= 1
	})
	if _, ok := started.Load("a:2"); ok {
		t.Fatal("a second run of key a started while the first held its only slot")
	}
	if _, err := b.client.Enqueue(asynq.NewTask("call", []byte("b:1")), asynq.Retention(time.Hour)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "all three completed", func() bool {
		done, _ := b.insp.ListCompletedTasks("default")
		return len(done) == 3
	})
	if arch, _ := b.insp.ListArchivedTasks("default"); len(arch) != 0 {
		t.Fatalf("%d archived", len(arch))
	}
}

// A rate of 5 starts per second per key with a burst of 2, over two guards and 16 tasks of one
// key (half with no retry): no window of the granted starts (Redis's clock) holds more than
// rate × span + burst, and every task is done, none archived.
func TestLeaseLimitRateSpacesStartsOfAKey(t *testing.T) {
	t.Parallel()
	b := setup(t, middleware.Config{})
	other := middleware.New(b.rdb, middleware.Config{Prefix: "t"})
	t.Cleanup(func() { _ = other.Close() })
	const rate, burst, tasks = 5, 2, 16
	lease := middleware.Lease{Resource: taskResource, Limit: middleware.LeaseLimit{Rate: rate, Burst: burst}}
	b.guard.ProtectLease("call", lease)
	other.ProtectLease("call", lease)
	var mu sync.Mutex
	var starts []time.Time
	h := func(ctx context.Context, task *asynq.Task) error {
		run, _ := middleware.RunFrom(ctx)
		mu.Lock()
		starts = append(starts, run.LimitStart())
		mu.Unlock()
		return nil
	}
	b.serve(t, asynq.Config{Concurrency: 4}, map[string]asynq.HandlerFunc{"call": h})
	b.serveWith(t, other, asynq.Config{Concurrency: 4}, map[string]asynq.HandlerFunc{"call": h})
	for i := range tasks {
		if _, err := b.client.Enqueue(asynq.NewTask("call", []byte(fmt.Sprint(i))), asynq.MaxRetry(i%2*5)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 60*time.Second, "every task done", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(starts) == tasks
	})
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	for i := range starts {
		if starts[i].IsZero() {
			t.Fatal("a rate-limited run without its granted start")
		}
		for j := i + 1; j < len(starts); j++ {
			span := starts[j].Sub(starts[i])
			if allowed := rate*span.Seconds() + burst; float64(j-i+1) > allowed+1e-9 {
				t.Fatalf("%d starts within %s: the rate allows %.2f", j-i+1, span, allowed)
			}
		}
	}
	if n, _ := b.insp.ListArchivedTasks("default"); len(n) != 0 {
		t.Fatalf("%d tasks archived: a wait for the rate counted as a failure", len(n))
	}
}

// A run whose slot Redis dropped (as an expiry would) is told at its next renewal: its context
// ends with cause ErrSlotLost and ValidFor is 0; the delivery bounces without failing, and its
// next delivery runs.
func TestLeaseLimitLostSlotCancelsTheRun(t *testing.T) {
	t.Parallel()
	b := setup(t, middleware.Config{LeaseTTL: time.Second})
	b.guard.ProtectLease("call", middleware.Lease{Resource: taskResource, Limit: middleware.LeaseLimit{Key: limitKeyOf, Concurrency: 1}})
	var runs atomic.Int64
	lost := make(chan error, 1)
	var validAfter atomic.Int64
	h := func(ctx context.Context, task *asynq.Task) error {
		run, _ := middleware.RunFrom(ctx)
		if runs.Add(1) > 1 {
			return nil
		}
		b.rdb.Del(ctx, engine.LimitHoldersKey(run.Locks(), "call", "a"))
		<-ctx.Done()
		validAfter.Store(int64(run.ValidFor()))
		lost <- context.Cause(ctx)
		return context.Cause(ctx)
	}
	b.serve(t, asynq.Config{Concurrency: 2}, map[string]asynq.HandlerFunc{"call": h})
	if _, err := b.client.Enqueue(asynq.NewTask("call", []byte("a:1")), asynq.MaxRetry(1), asynq.Retention(time.Hour)); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-lost:
		if !errors.Is(cause, middleware.ErrSlotLost) {
			t.Fatalf("the run's context ended with %v, want ErrSlotLost", cause)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the run whose slot was dropped was never stopped")
	}
	if v := validAfter.Load(); v != 0 {
		t.Fatalf("ValidFor %v after the slot was lost, want 0", time.Duration(v))
	}
	eventually(t, 15*time.Second, "the task completed by its next delivery", func() bool {
		done, _ := b.insp.ListCompletedTasks("default")
		return len(done) == 1
	})
	if arch, _ := b.insp.ListArchivedTasks("default"); len(arch) != 0 {
		t.Fatalf("%d archived", len(arch))
	}
}
