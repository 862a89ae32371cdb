// Command jobguardpeer is jobguard's job-level stack in make bench-peers, built as the
// side-by-side benchmark (internal/engine) builds it: the engine's Enqueue (record, delivery,
// confirmation) and its mux on an asynq server (lease, fence, attempt, status, timeline).
package main

import (
	"context"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/benchpeers/peer"
	"github.com/jobguard/jobguard/internal/benchpeers/peerredis"
	"github.com/jobguard/jobguard/internal/engine"
)

func main() {
	f, rdb, _ := peerredis.Open()
	stack := engine.New(rdb, engine.Config{Concurrency: f.Concurrency})
	client := stack.EnqueueClient() // as middleware.Guard's: concurrent enqueues share pipelines
	var run func(context.Context, []byte) error
	stack.Register(engine.TaskConfig{Type: peerredis.TaskType}, func(ctx context.Context, job *engine.Job) error { return run(ctx, job.Payload) })
	peer.Main(f, func(ctx context.Context, body []byte) error {
		_, err := stack.Enqueue(ctx, client, engine.Spec{Type: peerredis.TaskType, Payload: body})
		return err
	}, func() (peer.Worker, error) {
		srv := asynq.NewServerFromRedisClient(rdb, stack.ServerConfig(asynq.Config{Concurrency: f.Concurrency, LogLevel: asynq.FatalLevel}))
		return &worker{stack: stack, srv: srv, run: &run}, rdb.Ping(context.Background()).Err()
	})
}

type worker struct {
	stack *engine.Stack
	srv   *asynq.Server
	run   *func(context.Context, []byte) error
}

func (w *worker) Start(run func(context.Context, []byte) error) error {
	*w.run = run
	return w.srv.Start(w.stack.Mux())
}

// Stop shuts down as the template's worker does, then sweeps once as every rescue pass does
// (ended jobs leave the expiry index), so that the retained memory is that of a steady state.
func (w *worker) Stop() {
	w.stack.BeginShutdown()
	w.srv.Shutdown()
	_, _ = w.stack.ExpireDue(context.Background())
	w.stack.Close()
}
