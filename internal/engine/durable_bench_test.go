package engine

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/redistest"
)

// roundTrips counts the client's round trips (a command alone or a pipeline).
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { r.n.Add(1); return next(ctx, cmd) }
}
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { r.n.Add(1); return next(ctx, cmds) }
}

// BenchmarkDurableCost measures what durable mode costs per write, against a master with one
// replica on loopback: an enqueue (create, asynq's enqueue, confirmation: the confirmation's WAIT
// is pipelined) and one script write alone (jobstore.Durability.Exec), each with and without a
// WAIT, in interleaved rounds so both see the same machine. It reports p50 and p99 latency and
// round trips per operation of each mode (go test -run '^$' -bench DurableCost ./internal/engine/).
func BenchmarkDurableCost(b *testing.B) {
	master := redistest.Start(b)
	replica := redistest.Start(b, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	if err := redistest.WaitReplica(replica.Addr, 20*time.Second); err != nil {
		b.Fatal(err)
	}
	type mode struct {
		name    string
		rdb     *redis.Client
		trips   *roundTrips
		stack   *Stack
		client  *asynq.Client
		d       jobstore.Durability
		enqueue []time.Duration
		write   []time.Duration
		tripsE  int64
		tripsW  int64
	}
	var modes []*mode
	for _, replicas := range []int{0, 1} {
		m := &mode{name: map[int]string{0: "async", 1: "durable"}[replicas], trips: &roundTrips{}}
		m.rdb = master.Client(b, 0)
		m.rdb.AddHook(m.trips)
		m.d = jobstore.Durability{Replicas: replicas, Timeout: time.Second}
		m.stack = New(m.rdb, Config{Prefix: "bench-" + m.name, DurableReplicas: replicas, DurableTimeout: time.Second})
		m.stack.Register(TaskConfig{Type: "bench", Queue: "bench-" + m.name}, func(context.Context, *Job) error { return nil })
		m.client = asynq.NewClientFromRedisClient(m.rdb)
		b.Cleanup(func() { m.stack.Close() })
		modes = append(modes, m)
	}
	ctx := context.Background()
	const perRound = 20
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		order := modes
		if i%2 == 1 {
			order = []*mode{modes[1], modes[0]}
		}
		for _, m := range order {
			for j := 0; j < perRound; j++ {
				before := m.trips.n.Load()
				began := time.Now()
				if _, err := m.stack.Enqueue(ctx, m.client, Spec{Type: "bench", Tenant: "t"}); err != nil {
					b.Fatal(err)
				}
				m.enqueue = append(m.enqueue, time.Since(began))
				m.tripsE += m.trips.n.Load() - before

				before = m.trips.n.Load()
				began = time.Now()
				key := fmt.Sprintf("bench-%s:w%d", m.name, j)
				if err := m.d.Exec(ctx, m.rdb, func(p redis.Pipeliner) { p.Set(ctx, key, i, time.Minute) }); err != nil {
					b.Fatal(err)
				}
				m.write = append(m.write, time.Since(began))
				m.tripsW += m.trips.n.Load() - before
			}
		}
	}
	b.StopTimer()
	for _, m := range modes {
		n := float64(len(m.enqueue))
		b.ReportMetric(pct(m.enqueue, 50), m.name+"-enqueue-p50-µs")
		b.ReportMetric(pct(m.enqueue, 99), m.name+"-enqueue-p99-µs")
		b.ReportMetric(float64(m.tripsE)/n, m.name+"-enqueue-trips")
		b.ReportMetric(pct(m.write, 50), m.name+"-write-p50-µs")
		b.ReportMetric(pct(m.write, 99), m.name+"-write-p99-µs")
		b.ReportMetric(float64(m.tripsW)/n, m.name+"-write-trips")
	}
}

// pct is the p-th percentile of ds in µs.
func pct(ds []time.Duration, p int) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return float64(s[min(len(s)-1, len(s)*p/100)].Microseconds())
}
