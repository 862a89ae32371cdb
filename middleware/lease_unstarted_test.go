package middleware_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/middleware"
)

// steppedClock is the system clock moved on by Advance.
type steppedClock struct {
	mu sync.Mutex
	by time.Duration
}

func (c *steppedClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return time.Now().Add(c.by) }

func (c *steppedClock) Advance(d time.Duration) { c.mu.Lock(); c.by += d; c.mu.Unlock() }

// takenByADeadWorker does to task id of queue what asynq's dequeue does (pending to active,
// leased for 30 s) for a worker that then dies before the lease start script: no server lists it.
func takenByADeadWorker(t *testing.T, rdb *redis.Client, queue, id string) {
	t.Helper()
	q := "asynq:{" + queue + "}:"
	if n := rdb.LRem(ctx, q+"pending", 0, id).Val(); n != 1 {
		t.Fatalf("task %s is not pending in %s", id, queue)
	}
	rdb.LPush(ctx, q+"active", id)
	rdb.HSet(ctx, q+"t:"+id, "state", "active")
	rdb.HDel(ctx, q+"t:"+id, "pending_since")
	rdb.ZAdd(ctx, q+"lease", redis.Z{Score: float64(time.Now().Add(30 * time.Second).Unix()), Member: id})
}

// backToPending is asynq's recoverer giving an active task whose worker died back to the queue.
func backToPending(rdb *redis.Client, queue, id string) {
	q := "asynq:{" + queue + "}:"
	rdb.LRem(ctx, q+"active", 0, id)
	rdb.ZRem(ctx, q+"lease", id)
	rdb.HSet(ctx, q+"t:"+id, "state", "pending")
	rdb.LPush(ctx, q+"pending", id)
}

// A worker killed after asynq handed it a lease-level task but before the lease start script ran
// left the task active with no run marker: no lease lapses, so only asynq's recoverer (60-120 s)
// brought it back. The lease level's rescuer now hands such a task, listed by no live server for
// engine.UnstartedGrace, to a copy (before the fix no pass rescued it), and the original, when
// asynq gives it back, is acknowledged without running. A task of the same type in a queue this
// process does not serve (another application's, a plain asynq one) is left alone.
func TestLeaseLevelRescuesATaskTakenByAWorkerThatDiedBeforeItsStart(t *testing.T) {
	t.Parallel()
	b := setup(t, middleware.Config{})
	b.guard.ProtectLease("reserve", middleware.Lease{Resource: skuOf})
	original, err := b.client.Enqueue(asynq.NewTask("reserve", []byte("9")))
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := b.client.Enqueue(asynq.NewTask("reserve", []byte("9")), asynq.Queue("plain-app"))
	if err != nil {
		t.Fatal(err)
	}
	takenByADeadWorker(t, b.rdb, "default", original.ID)
	takenByADeadWorker(t, b.rdb, "plain-app", foreign.ID)

	clock := &steppedClock{}
	rescuer := middleware.New(b.rdb, middleware.Config{Prefix: "t", Clock: clock, WorkerID: "rescuer"})
	defer rescuer.Close()
	rescuer.ProtectLease("reserve", middleware.Lease{Resource: skuOf})
	_ = rescuer.ServerConfig(asynq.Config{}) // it serves the default queue
	if n, err := rescuer.RescueLeases(ctx, b.insp); err != nil || n != 0 {
		t.Fatalf("first pass: %d rescued, %v; want 0 (just seen)", n, err)
	}
	clock.Advance(engine.UnstartedGrace - time.Second)
	if n, _ := rescuer.RescueLeases(ctx, b.insp); n != 0 {
		t.Fatalf("a pass within the grace rescued %d", n)
	}
	clock.Advance(2 * time.Second)
	if n, err := rescuer.RescueLeases(ctx, b.insp); err != nil || n != 1 {
		t.Fatalf("pass after the grace: %d rescued, %v; want 1", n, err)
	}
	clock.Advance(engine.UnstartedGrace)
	if n, _ := rescuer.RescueLeases(ctx, b.insp); n != 0 {
		t.Fatalf("a later pass rescued %d more", n)
	}
	if pending, _ := b.insp.ListPendingTasks("plain-app"); len(pending) != 0 {
		t.Fatalf("the plain app's task got %d copies", len(pending))
	}
	if info, err := b.insp.GetTaskInfo("plain-app", foreign.ID); err != nil || info.State != asynq.TaskStateActive {
		t.Fatalf("the plain app's task: %+v %v", info, err)
	}

	var runs atomic.Int64
	b.serve(t, asynq.Config{Concurrency: 2}, map[string]asynq.HandlerFunc{"reserve": func(context.Context, *asynq.Task) error {
		runs.Add(1)
		return nil
	}})
	eventually(t, 30*time.Second, "the copy ran", func() bool { return runs.Load() == 1 })
	backToPending(b.rdb, "default", original.ID)
	eventually(t, 30*time.Second, "the original acknowledged", func() bool { return b.completed(t, "default") == 2 })
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d runs, want 1 (the copy; the original was superseded)", n)
	}
}

// cutAtEnqueue fails every command from asynq's first enqueue of a task on, until the test ends
// the cut: Redis went away just after
// the rescuer marked the task adopting, so the copy's enqueue and the mark's removal both fail.
type cutAtEnqueue struct{ cut, once atomic.Bool }

var errCut = errors.New("cut: connection reset")

func (c *cutAtEnqueue) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *cutAtEnqueue) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		for _, a := range cmd.Args() {
			if s, ok := a.(string); ok && strings.HasPrefix(s, "asynq:{") && strings.Contains(s, "}:t:") && !c.once.Swap(true) {
				c.cut.Store(true) // the first enqueue only
			}
		}
		if c.cut.Load() {
			cmd.SetErr(errCut)
			return errCut
		}
		return next(ctx, cmd)
	}
}

func (c *cutAtEnqueue) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if c.cut.Load() {
			return errCut
		}
		return next(ctx, cmds)
	}
}

// A rescue of an unstarted task whose copy's enqueue and mark's removal both failed (Redis away
// for a moment) leaves the task marked adopting by a copy that does not exist; the next pass
// enqueues that copy and finishes the hand-over, the copy runs once and the original, given back
// by asynq, is acknowledged without running.
func TestLeaseLevelUnstartedRescueCutAtItsEnqueueIsFinishedByTheNextPass(t *testing.T) {
	t.Parallel()
	b := setup(t, middleware.Config{})
	b.guard.ProtectLease("reserve", middleware.Lease{Resource: skuOf})
	original, err := b.client.Enqueue(asynq.NewTask("reserve", []byte("10")))
	if err != nil {
		t.Fatal(err)
	}
	takenByADeadWorker(t, b.rdb, "default", original.ID)
	cut := &cutAtEnqueue{}
	flaky := redis.NewClient(b.rdb.Options())
	flaky.AddHook(cut)
	defer flaky.Close()
	clock := &steppedClock{}
	rescuer := middleware.New(flaky, middleware.Config{Prefix: "t", Clock: clock, WorkerID: "rescuer"})
	defer rescuer.Close()
	rescuer.ProtectLease("reserve", middleware.Lease{Resource: skuOf})
	_ = rescuer.ServerConfig(asynq.Config{})
	_, _ = rescuer.RescueLeases(ctx, b.insp)
	clock.Advance(engine.UnstartedGrace + time.Second)
	if n, _ := rescuer.RescueLeases(ctx, b.insp); n != 0 || !cut.cut.Load() {
		t.Fatalf("the cut pass rescued %d (cut: %v)", n, cut.cut.Load())
	}
	cut.cut.Store(false)
	if pending, _ := b.insp.ListPendingTasks("default"); len(pending) != 0 {
		t.Fatalf("a copy was enqueued through the cut: %d pending", len(pending))
	}
	if n, err := rescuer.RescueLeases(ctx, b.insp); err != nil || n != 1 {
		t.Fatalf("the next pass: %d rescued, %v; want the copy enqueued", n, err)
	}
	var runs atomic.Int64
	b.serve(t, asynq.Config{Concurrency: 2}, map[string]asynq.HandlerFunc{"reserve": func(context.Context, *asynq.Task) error {
		runs.Add(1)
		return nil
	}})
	eventually(t, 30*time.Second, "the copy ran", func() bool { return runs.Load() == 1 })
	backToPending(b.rdb, "default", original.ID)
	eventually(t, 30*time.Second, "the original acknowledged", func() bool { return b.completed(t, "default") == 2 })
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d runs, want 1 (the copy; the original was superseded)", n)
	}
}
