// Command river is River in make bench-peers: Client.Insert one job at a time, and a client
// working the default queue with MaxWorkers handlers and a fetch cooldown of 1 ms (River's
// least; its default is 100 ms), on the PostgreSQL the harness started (see
// internal/benchpeers/peer for the protocol). Every process runs River's migrations before it
// says ready (a no-op once they ran).
package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/jobguard/jobguard/internal/benchpeers/peer"
)

// noopArgs is the benchmark's job: its payload is the protocol's body.
type noopArgs peer.Body

func (noopArgs) Kind() string { return "noop" }

func main() {
	f := peer.ParseFlags()
	ctx := context.Background()
	pool, err := connect(ctx, f)
	if err != nil {
		fail(err)
	}
	var run func(context.Context, []byte) error
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[noopArgs]) error {
		return run(ctx, job.EncodedArgs)
	}))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: f.Concurrency}},
		Workers:       workers,
		FetchCooldown: time.Millisecond,
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		fail(err)
	}
	peer.Main(f, func(ctx context.Context, body []byte) error {
		var args noopArgs
		if err := json.Unmarshal(body, &args); err != nil {
			return err
		}
		_, err := client.Insert(ctx, args, nil)
		return err
	}, func() (peer.Worker, error) {
		return &worker{client: client, run: &run}, nil
	})
}

// connect opens a pool of a connection per caller or handler and ten more (River's notifier,
// elector and completer take their own), and runs River's migrations.
func connect(ctx context.Context, f peer.Flags) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(f.URL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(f.Concurrency + 10)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return nil, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, err
	}
	return pool, nil
}

type worker struct {
	client *river.Client[pgx.Tx]
	run    *func(context.Context, []byte) error
}

func (w *worker) Start(run func(context.Context, []byte) error) error {
	*w.run = run
	return w.client.Start(context.Background())
}

func (w *worker) Stop() { _ = w.client.Stop(context.Background()) }

func fail(err error) {
	slog.Error("river peer", "err", err)
	os.Exit(1)
}
