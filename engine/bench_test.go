package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// roundTrips counts commands and pipelines sent, except a new connection's handshake.
type roundTrips struct{ n atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "hello", "select", "client", "auth":
		default:
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() != "hello" && cmds[0].Name() != "select" && cmds[0].Name() != "client" {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

type run struct {
	perSecond, roundTrips float64
}

const benchConcurrency = 10

// drain starts a server on a counting client and waits until done() reaches n.
func drain(b *testing.B, db redistest.DB, n int, mux func(rdb *redis.Client) (asynq.Handler, func(asynq.Config) asynq.Config), done func() int64) run {
	counter := &roundTrips{}
	rdb := redis.NewClient(&redis.Options{Addr: db.Server.Addr, DB: db.N, PoolSize: 2*benchConcurrency + 10})
	rdb.AddHook(counter)
	defer rdb.Close()
	h, cfg := mux(rdb)
	srv := asynq.NewServerFromRedisClient(rdb, cfg(asynq.Config{Concurrency: benchConcurrency, Logger: testsupport.QuietAsynq{}, LogLevel: asynq.FatalLevel}))
	start := time.Now()
	if err := srv.Start(h); err != nil {
		b.Fatal(err)
	}
	for done() < int64(n) {
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	trips := counter.n.Load()
	srv.Shutdown()
	return run{perSecond: float64(n) / elapsed.Seconds(), roundTrips: float64(trips) / float64(n)}
}

// BenchmarkStackVsBareAsynq drains the same number of tasks with bare asynq and with the full
// stack (records, leases, fences, timeline, attempts), same Redis, same concurrency, one after the
// other, and reports both rates, their ratio and the Redis round trips per task of each. noop
// handlers show the stack's whole cost; handlers that wait 5 ms (a typical upstream call) show
// what a real service pays.
func BenchmarkStackVsBareAsynq(b *testing.B) {
	for _, c := range []struct {
		name string
		work time.Duration
	}{{"noop", 0}, {"io-5ms", 5 * time.Millisecond}} {
		b.Run(c.name, func(b *testing.B) { benchStackVsBare(b, c.work) })
	}
}

func benchStackVsBare(b *testing.B, work time.Duration) {
	n := max(b.N, 500)
	client := func(db redistest.DB) *asynq.Client { return asynq.NewClientFromRedisClient(db.Client) }
	pause := func() {
		if work > 0 {
			time.Sleep(work)
		}
	}

	bareDB := redistest.NewDB(b)
	for i := 0; i < n; i++ {
		if _, err := client(bareDB).Enqueue(asynq.NewTask("noop", nil)); err != nil {
			b.Fatal(err)
		}
	}
	var bareDone atomic.Int64
	bare := drain(b, bareDB, n, func(*redis.Client) (asynq.Handler, func(asynq.Config) asynq.Config) {
		return asynq.HandlerFunc(func(context.Context, *asynq.Task) error { pause(); bareDone.Add(1); return nil }),
			func(c asynq.Config) asynq.Config { return c }
	}, bareDone.Load)

	stackDB := redistest.NewDB(b)
	setup := New(stackDB.Client, Config{Concurrency: benchConcurrency})
	setup.Register(TaskConfig{Type: "noop"}, func(context.Context, *Job) error { return nil })
	for i := 0; i < n; i++ {
		if _, err := setup.Enqueue(bg, client(stackDB), Spec{Type: "noop"}); err != nil {
			b.Fatal(err)
		}
	}
	setup.Close()
	var stack *Stack
	full := drain(b, stackDB, n, func(rdb *redis.Client) (asynq.Handler, func(asynq.Config) asynq.Config) {
		stack = New(rdb, Config{Concurrency: benchConcurrency})
		stack.Register(TaskConfig{Type: "noop"}, func(context.Context, *Job) error { pause(); return nil })
		return stack.Mux(), stack.ServerConfig
	}, func() int64 { return stack.Stats.Succeeded.Load() })
	stack.Close()

	b.ReportMetric(bare.perSecond, "bare-tasks/s")
	b.ReportMetric(full.perSecond, "stack-tasks/s")
	b.ReportMetric(full.perSecond/bare.perSecond, "ratio")
	b.ReportMetric(bare.roundTrips, "bare-rt/task")
	b.ReportMetric(full.roundTrips, "stack-rt/task")
}
