package middleware_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/benchfig"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/middleware"
)

// drainCost is one side's drain of n pre-enqueued tasks: tasks per second, CPU µs per task of
// this process and of redis-server, and this process's heap objects per task.
type drainCost struct{ perSecond, goCPU, redisCPU, allocs float64 }

// mallocs is how many heap objects this process has allocated (a count: the same on a loaded
// machine, where the CPU figures are not).
func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func redisCPUSeconds(rdb *redis.Client) float64 {
	info := rdb.Info(context.Background(), "cpu").Val()
	sum := 0.0
	for _, line := range strings.Split(info, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return sum
}

// drain enqueues n tasks of one resource each, then serves them with concurrency c, protected by
// a guard at lease level or bare, and measures the drain.
func drain(b *testing.B, guarded bool, n, c int, work time.Duration) drainCost {
	db := redistest.NewDB(b)
	client := asynq.NewClientFromRedisClient(db.Client)
	defer client.Close()
	for i := range n {
		if _, err := client.Enqueue(asynq.NewTask("bench", []byte(strconv.Itoa(i)))); err != nil {
			b.Fatal(err)
		}
	}
	var done atomic.Int64
	mux := asynq.NewServeMux()
	cfg := asynq.Config{Concurrency: c, LogLevel: asynq.FatalLevel}
	if guarded {
		g := middleware.New(db.Client, middleware.Config{Prefix: "b"})
		defer g.Close()
		g.ProtectLease("bench", middleware.Lease{Resource: func(t *asynq.Task) (string, error) { return "r:" + string(t.Payload()), nil }})
		mux.Use(g.Middleware())
		cfg = g.ServerConfig(cfg)
	}
	mux.HandleFunc("bench", func(ctx context.Context, t *asynq.Task) error {
		time.Sleep(work)
		done.Add(1)
		return nil
	})
	srv := asynq.NewServerFromRedisClient(db.Client, cfg)
	goCPU, rCPU, objects, start := cpuSeconds(), redisCPUSeconds(db.Client), mallocs(), time.Now()
	if err := srv.Start(mux); err != nil {
		b.Fatal(err)
	}
	for done.Load() < int64(n) {
		time.Sleep(2 * time.Millisecond)
	}
	elapsed := time.Since(start)
	res := drainCost{perSecond: float64(n) / elapsed.Seconds(), goCPU: (cpuSeconds() - goCPU) * 1e6 / float64(n),
		redisCPU: (redisCPUSeconds(db.Client) - rCPU) * 1e6 / float64(n), allocs: float64(mallocs()-objects) / float64(n)}
	srv.Shutdown()
	return res
}

// BenchmarkLeaseVsBareAsynq drains the same tasks with a no-op handler at concurrency 50 and with
// a 5 ms handler at concurrency 10, bare asynq and under the lease level, in interleaved rounds
// (the order alternating), and prints each side's median and spread and the ratio.
func BenchmarkLeaseVsBareAsynq(b *testing.B) {
	n := benchfig.Tasks(5000)
	for _, w := range []struct {
		name string
		c    int
		work time.Duration
	}{{"no-op c=50", 50, 0}, {"5ms c=10", 10, 5 * time.Millisecond}} {
		var bare, lease [4][]float64
		for round := range benchfig.Rounds() {
			for i := range 2 {
				guarded := (round+i)%2 == 1
				d := drain(b, guarded, n, w.c, w.work)
				side := &bare
				if guarded {
					side = &lease
				}
				side[0] = append(side[0], d.perSecond)
				side[1] = append(side[1], d.goCPU)
				side[2] = append(side[2], d.redisCPU)
				side[3] = append(side[3], d.allocs)
			}
		}
		for i, m := range []string{"tasks/s", "worker CPU µs/task", "redis CPU µs/task", "heap objects/task"} {
			fmt.Printf("lease level vs bare asynq, %s, %d tasks: %s: bare %s, lease %s, lease/bare %s\n", w.name, n, m,
				benchfig.Summary(bare[i]), benchfig.Summary(lease[i]), benchfig.Ratio(bare[i], lease[i]))
			benchfig.AddRow(benchfig.Row{Benchmark: "lease level (" + w.name + ")", Measure: m,
				Baseline: benchfig.Summary(bare[i]), Jobguard: benchfig.Summary(lease[i]), Ratio: benchfig.Ratio(bare[i], lease[i])})
		}
	}
}
