package middleware_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/middleware"
)

// Durable mode at lease level: with the replica paused (SIGSTOP) a lease start is not
// acknowledged, so the handler does not run and the lease is given back; once the replica is
// back the task runs, once. Guard.Enqueue of a job-level type fails with ErrNotDurable meanwhile.
func TestDurableLeaseStartDoesNotRunWithoutItsReplica(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	if err := redistest.WaitReplica(replica.Addr, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	rdb := master.Client(t, 0)
	guard := middleware.New(rdb, middleware.Config{Prefix: "d", DurableReplicas: 1, DurableTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = guard.Close() })
	guard.ProtectLease("work", middleware.Lease{Resource: func(t *asynq.Task) (string, error) { return "r1", nil }})
	guard.ProtectJob("job", middleware.Job{})
	var runs atomic.Int32
	mux := asynq.NewServeMux()
	mux.Use(guard.Middleware())
	mux.HandleFunc("work", func(context.Context, *asynq.Task) error { runs.Add(1); return nil })
	mux.HandleFunc("job", func(context.Context, *asynq.Task) error { return nil })

	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = replica.Resume() }()
	if _, err := guard.Enqueue(ctx, asynq.NewTask("job", nil), middleware.EnqueueOptions{}); !errors.Is(err, middleware.ErrNotDurable) {
		t.Fatalf("Guard.Enqueue with the replica paused: %v", err)
	}
	// Enqueued before the server starts, while the replica is paused (asynq's own write needs none).
	if _, err := asynq.NewClientFromRedisClient(rdb).Enqueue(asynq.NewTask("work", nil)); err != nil {
		t.Fatal(err)
	}
	srv := asynq.NewServerFromRedisClient(rdb, guard.ServerConfig(asynq.Config{Concurrency: 2, LogLevel: asynq.FatalLevel,
		DelayedTaskCheckInterval: 100 * time.Millisecond}))
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	eventually(t, 10*time.Second, "a bounced start", func() bool {
		qi, err := insp.GetQueueInfo("default")
		return err == nil && qi.Retry+qi.Scheduled > 0
	})
	// A bounce is retried at once: stop taking deliveries and let the one in hand end, so the
	// lease is read between starts, not while the next start holds it for its own replica wait.
	srv.Stop()
	eventually(t, 10*time.Second, "no delivery in hand", func() bool {
		qi, err := insp.GetQueueInfo("default")
		return err == nil && qi.Active == 0
	})
	srv.Shutdown()
	if n := runs.Load(); n != 0 {
		t.Fatalf("the handler ran %d times on starts the replica did not hold", n)
	}
	if held := rdb.Exists(ctx, guard.Locks().LeaseKey("r1")).Val(); held != 0 {
		t.Fatal("the lease of a start that did not run is still held")
	}
	if err := replica.Resume(); err != nil {
		t.Fatal(err)
	}
	again := asynq.NewServerFromRedisClient(rdb, guard.ServerConfig(asynq.Config{Concurrency: 2, LogLevel: asynq.FatalLevel,
		DelayedTaskCheckInterval: 100 * time.Millisecond}))
	if err := again.Start(mux); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(again.Shutdown)
	eventually(t, 15*time.Second, "the task ran after the replica came back", func() bool { return runs.Load() == 1 })
}
