// Command asynqpeer is bare asynq in make bench-peers: Client.Enqueue, and a server whose
// handler only runs the benchmark's job (see internal/benchpeers/peer for the protocol).
package main

import (
	"context"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/benchpeers/peer"
	"github.com/jobguard/jobguard/internal/benchpeers/peerredis"
)

func main() {
	f, rdb, client := peerredis.Open()
	peer.Main(f, peerredis.Enqueue(client), func() (peer.Worker, error) {
		srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: f.Concurrency, LogLevel: asynq.FatalLevel})
		return &worker{srv: srv}, rdb.Ping(context.Background()).Err()
	})
}

type worker struct{ srv *asynq.Server }

func (w *worker) Start(run func(context.Context, []byte) error) error {
	return w.srv.Start(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error { return run(ctx, t.Payload()) }))
}

func (w *worker) Stop() { w.srv.Shutdown() }
