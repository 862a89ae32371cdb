// Command asynqpeer is bare asynq in make bench-peers: Client.Enqueue, and a server whose
// handler only runs the benchmark's job (see internal/benchpeers/peer for the protocol).
package main

import (
	"context"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/benchpeers/peer"
)

func main() {
	f := peer.ParseFlags()
	rdb := redisClient(f)
	client := asynq.NewClientFromRedisClient(rdb)
	peer.Main(f, func(ctx context.Context, body []byte) error {
		_, err := client.EnqueueContext(ctx, asynq.NewTask("noop", body))
		return err
	}, func() (peer.Worker, error) {
		srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: f.Concurrency, LogLevel: asynq.FatalLevel})
		return &worker{srv: srv}, rdb.Ping(context.Background()).Err()
	})
}

// redisClient is the process's one client, pooled as the side-by-side benchmark's (two
// connections a handler, and ten).
func redisClient(f peer.Flags) *redis.Client {
	opt, err := redis.ParseURL(f.URL)
	if err != nil {
		panic(err)
	}
	opt.PoolSize = 2*f.Concurrency + 10
	return redis.NewClient(opt)
}

type worker struct{ srv *asynq.Server }

func (w *worker) Start(run func(context.Context, []byte) error) error {
	return w.srv.Start(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error { return run(ctx, t.Payload()) }))
}

func (w *worker) Stop() { w.srv.Shutdown() }
