package engine

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
)

// BenchmarkLimitNeverReached drains chunks of jobs through the full stack with a concurrency
// limit per key that is never reached (1000 per key, 10 handlers, every job of one tenant) and
// without one, interleaved (limited, unlimited, limited, ...) so that drift in the machine's load
// falls on both; it prints each side's median rate and spread, their ratio and the Redis round
// trips per job of each. No timing is asserted. noop handlers show the whole cost (the stack is
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
	const chunks = 6
	n := max(b.N, 400)
	var rates, trips [2][]float64 // [0] without, [1] with the limit
	for c := 0; c < 2*chunks; c++ {
		limited := c%2 == 0
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
		rates[i] = append(rates[i], r.perSecond)
		trips[i] = append(trips[i], r.roundTrips)
	}
	med := func(v []float64) float64 { s := slices.Clone(v); slices.Sort(s); return s[len(s)/2] }
	spread := func(v []float64) string { return fmt.Sprintf("%.0f-%.0f", slices.Min(v), slices.Max(v)) }
	b.Logf("%d chunks of %d jobs each side, interleaved: without limit median %.0f jobs/s (%s), with a never-reached limit %.0f jobs/s (%s); ratio %.2f; round trips per job %.2f without, %.2f with",
		chunks, n, med(rates[0]), spread(rates[0]), med(rates[1]), spread(rates[1]), med(rates[1])/med(rates[0]), med(trips[0]), med(trips[1]))
	b.ReportMetric(med(rates[0]), "unlimited-jobs/s")
	b.ReportMetric(med(rates[1]), "limited-jobs/s")
	b.ReportMetric(med(rates[1])/med(rates[0]), "ratio")
	b.ReportMetric(med(trips[0]), "unlimited-rt/job")
	b.ReportMetric(med(trips[1]), "limited-rt/job")
}
