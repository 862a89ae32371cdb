package engine

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"

	"github.com/jobguard/jobguard/internal/benchfig"
)

const benchConcurrency = 10

// drain starts a server of the given concurrency on a counting client, waits until done()
// reaches n, and returns what the chunk cost per task.
func drain(b *testing.B, db redistest.DB, n, concurrency int, mux func(rdb *redis.Client) (asynq.Handler, func(asynq.Config) asynq.Config), done func() int64) cost {
	counter := &testsupport.RoundTrips{}
	rdb := redis.NewClient(&redis.Options{Addr: db.Server.Addr, DB: db.N, PoolSize: 2*concurrency + 10})
	rdb.AddHook(counter)
	defer rdb.Close()
	h, cfg := mux(rdb)
	srv := asynq.NewServerFromRedisClient(rdb, cfg(asynq.Config{Concurrency: concurrency, Logger: testsupport.QuietAsynq{}, LogLevel: asynq.FatalLevel}))
	m, err := startMeter(db.Client)
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(h); err != nil {
		b.Fatal(err)
	}
	for done() < int64(n) {
		time.Sleep(time.Millisecond)
	}
	c, err := m.stop(n, counter.N())
	srv.Shutdown()
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkStackVsBareAsynq drains chunks of the same number of tasks with bare asynq and with the
// full stack (records, leases, fences, timeline, attempts), same Redis, same concurrency, in
// alternation (bare, stack, stack, bare, ...: drift in the machine's load falls on both sides),
// BENCH_ROUNDS chunks each (default 5), and prints one table per case: tasks/s, tasks/s per core,
// round trips, Go and Redis CPU µs and Redis calls per task, each side's median and spread. noop
// handlers show the stack's whole cost; handlers that wait 5 ms (a typical upstream call) what a
// real service pays, at concurrency 10 and 50. It asserts nothing about time.
func BenchmarkStackVsBareAsynq(b *testing.B) {
	for _, work := range []time.Duration{0, 5 * time.Millisecond} {
		for _, concurrency := range []int{10, 50} {
			name := fmt.Sprintf("noop-c%d", concurrency)
			if work > 0 {
				name = fmt.Sprintf("io-%s-c%d", work, concurrency)
			}
			b.Run(name, func(b *testing.B) { benchStackVsBare(b, name, work, concurrency) })
		}
	}
}

func benchStackVsBare(b *testing.B, name string, work time.Duration, concurrency int) {
	n := benchfig.Tasks(2000)
	var s sides
	for round := 0; round < 2*benchfig.Rounds(); round++ {
		stackSide := round%4 == 1 || round%4 == 2 // bare, stack, stack, bare, ...
		if stackSide {
			s[1] = append(s[1], stackChunk(b, n, concurrency, work))
		} else {
			s[0] = append(s[0], bareChunk(b, n, concurrency, work))
		}
	}
	s.table(os.Stdout, fmt.Sprintf("jobguard vs bare asynq, %s, %d tasks a chunk", name, n), [2]string{"bare asynq", "jobguard"})
	s.summary("full stack vs bare asynq, " + name)
	b.ReportMetric(benchfig.Median(pick(s[0], func(c cost) float64 { return c.perSecond })), "bare-tasks/s")
	b.ReportMetric(benchfig.Median(pick(s[1], func(c cost) float64 { return c.perSecond })), "stack-tasks/s")
	b.ReportMetric(benchfig.Median(pick(s[1], func(c cost) float64 { return c.perSecond }))/benchfig.Median(pick(s[0], func(c cost) float64 { return c.perSecond })), "ratio")
	b.ReportMetric(benchfig.Median(pick(s[1], func(c cost) float64 { return c.roundTrips })), "stack-rt/task")
}

// pause is the handler's work: a sleep standing for an upstream call, or nothing.
func pause(work time.Duration) {
	if work > 0 {
		time.Sleep(work)
	}
}

// bareChunk enqueues n tasks with a plain asynq client and drains them with a plain handler.
func bareChunk(b *testing.B, n, concurrency int, work time.Duration) cost {
	db := redistest.NewDB(b)
	client := asynq.NewClientFromRedisClient(db.Client)
	for i := 0; i < n; i++ {
		if _, err := client.Enqueue(asynq.NewTask("noop", nil)); err != nil {
			b.Fatal(err)
		}
	}
	var done atomic.Int64
	return drain(b, db, n, concurrency, func(*redis.Client) (asynq.Handler, func(asynq.Config) asynq.Config) {
		return asynq.HandlerFunc(func(context.Context, *asynq.Task) error { pause(work); done.Add(1); return nil }),
			func(c asynq.Config) asynq.Config { return c }
	}, done.Load)
}

// stackChunk enqueues n jobs through the engine and drains them with the full stack.
func stackChunk(b *testing.B, n, concurrency int, work time.Duration) cost {
	db := redistest.NewDB(b)
	setup := New(db.Client, Config{Concurrency: concurrency})
	setup.Register(TaskConfig{Type: "noop"}, func(context.Context, *Job) error { return nil })
	client := asynq.NewClientFromRedisClient(db.Client)
	for i := 0; i < n; i++ {
		if _, err := setup.Enqueue(bg, client, Spec{Type: "noop"}); err != nil {
			b.Fatal(err)
		}
	}
	setup.Close()
	var stack *Stack
	c := drain(b, db, n, concurrency, func(rdb *redis.Client) (asynq.Handler, func(asynq.Config) asynq.Config) {
		stack = New(rdb, Config{Concurrency: concurrency})
		stack.Register(TaskConfig{Type: "noop"}, func(context.Context, *Job) error { pause(work); return nil })
		return stack.Mux(), stack.ServerConfig
	}, func() int64 { return stack.Stats.Succeeded.Load() })
	stack.Close()
	return c
}
