// Command leasepeer is jobguard's lease level in make bench-peers: producers enqueue with a plain
// asynq client, and the worker's mux runs the middleware (a lease and a fencing token per job,
// batched heartbeats, a run marker for rescue) around a plain asynq handler.
package main

import (
	"context"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/benchpeers/peer"
	"github.com/jobguard/jobguard/internal/benchpeers/peerredis"
	"github.com/jobguard/jobguard/middleware"
)

func main() {
	f, rdb, client := peerredis.Open()
	peer.Main(f, peerredis.Enqueue(client), func() (peer.Worker, error) {
		return &worker{rdb: rdb, concurrency: f.Concurrency}, rdb.Ping(context.Background()).Err()
	})
}

type worker struct {
	rdb         *redis.Client
	concurrency int
	guard       *middleware.Guard
	srv         *asynq.Server
}

// Start protects the type at lease level: each job is its own resource, a hash of its payload
// (which names the moment it was enqueued, unique enough; two alike would only take turns).
func (w *worker) Start(run func(context.Context, []byte) error) error {
	w.guard = middleware.New(w.rdb, middleware.Config{})
	w.guard.ProtectLease(peerredis.TaskType, middleware.Lease{Resource: func(t *asynq.Task) (string, error) {
		h := fnv.New64a()
		h.Write(t.Payload())
		return "job:" + strconv.FormatUint(h.Sum64(), 36), nil
	}, FenceTTL: time.Hour}) // a resource per job: its counter must not outlive it for ever
	mux := asynq.NewServeMux()
	mux.Use(w.guard.Middleware())
	mux.HandleFunc(peerredis.TaskType, func(ctx context.Context, t *asynq.Task) error { return run(ctx, t.Payload()) })
	w.srv = asynq.NewServerFromRedisClient(w.rdb, w.guard.ServerConfig(asynq.Config{Concurrency: w.concurrency, LogLevel: asynq.FatalLevel}))
	return w.srv.Start(mux)
}

func (w *worker) Stop() {
	w.guard.BeginShutdown()
	w.srv.Shutdown()
	_ = w.guard.Close()
}
