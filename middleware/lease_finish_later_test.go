package middleware_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/faultproxy"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/middleware"
)

// A successful run's finish (and its limit slot's release) is sent without the handler waiting for
// it; Close waits for it. Here the guard reaches Redis through a proxy that delays every answer, so
// the finish is still on its way when the handler has returned and asynq acknowledged the task:
// after Close, the lease and the slot are released all the same.
func TestLeaseLevelCloseWaitsForTheFinish(t *testing.T) {
	t.Parallel()
	for _, limited := range []bool{false, true} {
		t.Run(map[bool]string{false: "no limit", true: "a limited key"}[limited], func(t *testing.T) {
			t.Parallel()
			closeWaitsForTheFinish(t, limited)
		})
	}
}

func closeWaitsForTheFinish(t *testing.T, limited bool) {
	db := redistest.NewDB(t)
	px, err := faultproxy.New(db.Server.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.Close)
	slow := redis.NewClient(&redis.Options{Addr: px.Addr(), DB: db.N})
	t.Cleanup(func() { _ = slow.Close() })
	g := middleware.New(slow, middleware.Config{Prefix: "t"})
	lease := middleware.Lease{Resource: skuOf}
	if limited {
		lease.Limit = middleware.LeaseLimit{Key: func(*asynq.Task) string { return "k" }, Concurrency: 1}
	}
	g.ProtectLease("once", lease)
	var done atomic.Int64
	mux := asynq.NewServeMux()
	mux.Use(g.Middleware())
	mux.HandleFunc("once", func(ctx context.Context, task *asynq.Task) error {
		done.Add(1)
		return nil
	})
	srv := asynq.NewServerFromRedisClient(db.Client, g.ServerConfig(asynq.Config{Concurrency: 1, LogLevel: asynq.FatalLevel}))
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	client := asynq.NewClientFromRedisClient(db.Client)
	insp := asynq.NewInspectorFromRedisClient(db.Client)
	// run enqueues a task and waits for asynq's done (on the direct client), which comes after
	// the handler returned, so after the task's finish was sent.
	run := func(sku string, n int64) {
		t.Helper()
		if _, err := client.Enqueue(asynq.NewTask("once", []byte(sku))); err != nil {
			t.Fatal(err)
		}
		eventually(t, 20*time.Second, "the task run and acknowledged", func() bool {
			q, err := insp.GetQueueInfo("default")
			return err == nil && done.Load() == n && q.Active == 0 && q.Pending == 0
		})
	}
	run("1", 1) // the guard's connection and scripts are ready before the proxy slows down
	px.SetLatency(300 * time.Millisecond)
	run("2", 2)   // its finish's answer takes 600 ms through the proxy
	_ = g.Close() // its asynq client shares the Redis client, so it says it cannot close that
	defer srv.Shutdown()
	if n := db.Client.Exists(context.Background(), g.Locks().LeaseKey("sku:2")).Val(); n != 0 {
		t.Fatal("the lease is still held after Close: the finish on its way was not waited for")
	}
	if held := db.Client.Keys(context.Background(), "*limit:holders").Val(); len(held) != 0 {
		t.Fatalf("a limit slot is still held after Close (%v): its release on its way was not waited for", held)
	}
}
