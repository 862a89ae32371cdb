package engine

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/benchfig"
	"github.com/jobguard/jobguard/internal/redistest"
)

// BenchmarkLimitNeverReached drains chunks of jobs through the full stack with a concurrency
// limit per key that is never reached (1000 per key, 10 handlers, every job of one tenant) and
// without one, interleaved (without, with, with, without, ...: BENCH_ROUNDS chunks of BENCH_TASKS
// each side, default 5 of 1000) so that drift in the machine's load falls on both; it prints the
// side-by-side table (rate, CPU of Go and Redis, round trips, commands and scripts per job, each
// side's median and spread). No timing is asserted; run it with -benchtime 1x. noop handlers show the whole cost (the stack is
// round-trip bound); handlers that wait 5 ms (an upstream call) what a service pays.
func BenchmarkLimitNeverReached(b *testing.B) {
	for _, c := range []struct {
		name string
		work time.Duration
	}{{"noop", 0}, {"io-5ms", 5 * time.Millisecond}} {
		b.Run(c.name, func(b *testing.B) { benchLimitNeverReached(b, c.work) })
	}
}

func benchLimitNeverReached(b *testing.B, work time.Duration) {
	n := benchfig.Tasks(1000)
	var s sides // [0] without, [1] with the limit
	for c := 0; c < 2*benchfig.Rounds(); c++ {
		limited := c%4 == 1 || c%4 == 2 // without, with, with, without, ...
		tc := TaskConfig{Type: "noop"}
		if limited {
			tc.Limit = Limit{Concurrency: 1000, Key: func(s Spec) string { return s.Tenant }}
		}
		db := redistest.NewDB(b)
		setup := New(db.Client, Config{Concurrency: benchConcurrency})
		setup.Register(tc, func(context.Context, *Job) error { return nil })
		client := asynq.NewClientFromRedisClient(db.Client)
		for i := 0; i < n; i++ {
			if _, err := setup.Enqueue(bg, client, Spec{Type: "noop", Tenant: "t"}); err != nil {
				b.Fatal(err)
			}
		}
		setup.Close()
		var stack *Stack
		r := drain(b, db, n, benchConcurrency, func(rdb *redis.Client) (asynq.Handler, func(asynq.Config) asynq.Config) {
			stack = New(rdb, Config{Concurrency: benchConcurrency})
			stack.Register(tc, func(context.Context, *Job) error { time.Sleep(work); return nil })
			return stack.Mux(), stack.ServerConfig
		}, func() int64 { return stack.Stats.Succeeded.Load() })
		stack.Close()
		if limited && stack.Stats.Bounces.Load() > 0 {
			b.Fatalf("the limit was reached: %d bounces", stack.Stats.Bounces.Load())
		}
		i := 0
		if limited {
			i = 1
		}
		s[i] = append(s[i], r)
	}
	s.table(os.Stdout, fmt.Sprintf("a concurrency limit never reached vs none, handler %s, %d jobs a chunk", work, n), [2]string{"no limit", "limit never reached"})
	s.summary(fmt.Sprintf("a limit never reached vs none (stack both sides), handler %s", work))
	rate := func(c cost) float64 { return c.perSecond }
	b.ReportMetric(benchfig.Median(pick(s[0], rate)), "unlimited-jobs/s")
	b.ReportMetric(benchfig.Median(pick(s[1], rate)), "limited-jobs/s")
	b.ReportMetric(benchfig.Median(pick(s[1], rate))/benchfig.Median(pick(s[0], rate)), "ratio")
	b.ReportMetric(benchfig.Median(pick(s[1], func(c cost) float64 { return c.roundTrips })), "limited-rt/job")
}
