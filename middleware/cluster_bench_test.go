package middleware_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/middleware"
)

// BenchmarkClusterSpread runs a load of many resources and tenants through a sharded queue on a
// local cluster of 3 and of 6 masters (BENCH_CLUSTER_MASTERS, default "3,6"; 1 is one Redis, no cluster; BENCH_CLUSTER_JOBS
// jobs each, default 4000; BENCH_CLUSTER_SHARDS shards, default one per master, 1 for the unsharded
// baseline) and prints each master's share of Redis CPU (utime+stime of its
// process, /proc/<pid>/stat) and of commands (INFO commandstats) over the run, the hottest
// master's share against the mean, and Redis CPU per job. On a shared machine the absolute
// figures move with the neighbours; the shares are what the run shows. `make bench-cluster`.
func BenchmarkClusterSpread(b *testing.B) {
	masters := []int{3, 6}
	if v := os.Getenv("BENCH_CLUSTER_MASTERS"); v != "" {
		masters = masters[:0]
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n == 2 {
				b.Fatalf("BENCH_CLUSTER_MASTERS=%q: want masters counts of 1 (one Redis, no cluster) or at least 3", v)
			}
			masters = append(masters, n)
		}
	}
	jobs := 4000
	if v, err := strconv.Atoi(os.Getenv("BENCH_CLUSTER_JOBS")); err == nil && v > 0 {
		jobs = v
	}
	shards, _ := strconv.Atoi(os.Getenv("BENCH_CLUSTER_SHARDS"))
	// BENCH_CLUSTER_FAIR=n dispatches the jobs fairly by tenant, the admission state in n shards.
	fair, _ := strconv.Atoi(os.Getenv("BENCH_CLUSTER_FAIR"))
	for b.Loop() {
		for _, n := range masters {
			spreadRun(b, n, max(shards, 0), max(fair, 0), jobs)
		}
	}
}

// masterUse is what one master did over a run.
type masterUse struct {
	addr     string
	cpu      time.Duration
	commands int64
}

// idleWindow is how long the idle servers' background use (asynq's polling of every shard, the
// guard's loops, Redis's own cron and cluster bus) is measured, to be taken out of the per-job cost.
const idleWindow = 3 * time.Second

func spreadRun(b *testing.B, masters, nShards, fairShards, jobs int) {
	if nShards == 0 {
		nShards = masters
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var cl *redistest.Cluster
	var rdb redis.UniversalClient
	if masters == 1 {
		// One Redis, no cluster: the single-master reference.
		cl = &redistest.Cluster{Nodes: []*redistest.Server{redistest.Start(b)}}
		rdb = redis.NewClient(&redis.Options{Addr: cl.Nodes[0].Addr, PoolSize: 64})
	} else {
		var err error
		if cl, err = redistest.StartCluster(masters); err != nil {
			b.Fatal(err)
		}
		defer cl.Stop()
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), PoolSize: 64})
	}
	defer rdb.Close()
	g := middleware.New(rdb, middleware.Config{Prefix: "bench"})
	defer g.Close()
	job := middleware.Job{Queue: "work", MaxAttempts: 3}
	if fairShards > 0 {
		job.Fair = &middleware.Fair{Capacity: 32, Shards: fairShards} // the handlers' concurrency
	}
	g.ProtectJob("work", job)
	shards, err := g.ShardQueue(ctx, "work", nShards)
	if err != nil {
		b.Fatal(err)
	}
	var done atomic.Int64
	mux := asynq.NewServeMux()
	mux.Use(g.Middleware())
	mux.HandleFunc("work", func(context.Context, *asynq.Task) error { done.Add(1); return nil })
	srv := asynq.NewServerFromRedisClient(rdb, g.ServerConfig(asynq.Config{Concurrency: 32, LogLevel: asynq.FatalLevel,
		Queues: middleware.ServerQueues(map[string]int{"work": 1}, false, shards)}))
	if err := srv.Start(mux); err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	go func() { _ = g.Run(runCtx) }() // the rescuer, sweep and reconciler are part of the cost

	enqueue := func(from, to int) {
		var wg sync.WaitGroup
		next := atomic.Int64{}
		next.Store(int64(from))
		for range 16 {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(to); i = next.Add(1) - 1 {
					o := middleware.EnqueueOptions{Tenant: fmt.Sprint("tenant-", i%200), Resource: fmt.Sprint("res-", i%2000),
						Tags: []string{fmt.Sprint("kind-", i%5)}}
					if _, err := g.Enqueue(ctx, asynq.NewTask("work", nil), o); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	waitDone := func(n int64) {
		for done.Load() < n {
			if ctx.Err() != nil {
				b.Fatalf("%d of %d jobs done in time", done.Load(), n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	const warm = 200 // scripts loaded, queues listed, pools filled
	enqueue(0, warm)
	waitDone(warm)

	idleFrom := usage(b, cl)
	time.Sleep(idleWindow)
	before := usage(b, cl)
	selfBefore := processCPU(b, os.Getpid())
	start := time.Now()
	enqueue(warm, warm+jobs)
	waitDone(int64(warm + jobs))
	elapsed := time.Since(start)
	after := usage(b, cl)
	self := processCPU(b, os.Getpid()) - selfBefore

	var totalCPU, idleCPU time.Duration
	var totalCmds int64
	for i := range before {
		idleCPU += before[i].cpu - idleFrom[i].cpu
	}
	idleDuring := time.Duration(float64(idleCPU) * elapsed.Seconds() / idleWindow.Seconds())
	use := make([]masterUse, masters)
	for i := range use {
		use[i] = masterUse{addr: after[i].addr, cpu: after[i].cpu - before[i].cpu, commands: after[i].commands - before[i].commands}
		totalCPU += use[i].cpu
		totalCmds += use[i].commands
	}
	fairly := "FIFO"
	if fairShards > 0 {
		fairly = fmt.Sprintf("dispatched fairly by tenant, admission in %d shard(s)", fairShards)
	}
	fmt.Printf("\ncluster of %d masters, %d shard(s), %d jobs over 2000 resources and 200 tenants, %s, in %v (%.0f jobs/s on this machine)\n",
		masters, len(shards.Names), jobs, fairly, elapsed.Round(time.Millisecond), float64(jobs)/elapsed.Seconds())
	fmt.Printf("| master | Redis CPU | busy | share | commands | share | Redis CPU per job |\n|---|---|---|---|---|---|---|\n")
	var hotCPU, hotCmds float64
	for _, u := range use {
		cpuShare, cmdShare := float64(u.cpu)/float64(totalCPU), float64(u.commands)/float64(totalCmds)
		hotCPU, hotCmds = max(hotCPU, cpuShare), max(hotCmds, cmdShare)
		fmt.Printf("| %s | %v | %.0f%% | %.1f%% | %d | %.1f%% | %.1f µs |\n", u.addr, u.cpu, 100*u.cpu.Seconds()/elapsed.Seconds(), 100*cpuShare, u.commands, 100*cmdShare,
			float64(u.cpu.Microseconds())/float64(jobs))
	}
	mean := 1 / float64(masters)
	marginal := float64((totalCPU - idleDuring).Microseconds()) / float64(jobs)
	fmt.Printf("hottest master vs mean: CPU %.2fx, commands %.2fx (goal <= 1.3x); Redis CPU per job %.1f µs in all, %.1f commands per job\n",
		hotCPU/mean, hotCmds/mean, float64(totalCPU.Microseconds())/float64(jobs), float64(totalCmds)/float64(jobs))
	fmt.Printf("idle background %v per second over the cluster; Redis CPU per job without it %.1f µs: about %.0f jobs/s per master core when the load spreads evenly\n",
		time.Duration(float64(idleCPU)/idleWindow.Seconds()).Round(time.Millisecond), marginal, 1e6/marginal)
	b.ReportMetric(hotCPU/mean, "hottest-cpu/mean")
	b.ReportMetric(hotCmds/mean, "hottest-cmds/mean")
	b.ReportMetric(float64(totalCPU.Microseconds())/float64(jobs), "redis-cpu-µs/job")
	fmt.Printf("producers and workers (this process): %.1f µs of CPU per job\n", float64(self.Microseconds())/float64(jobs))
	b.ReportMetric(marginal, "redis-marginal-cpu-µs/job")
	b.ReportMetric(float64(self.Microseconds())/float64(jobs), "client-cpu-µs/job")
}

// usage reads each master's CPU time and command count so far.
func usage(b *testing.B, cl *redistest.Cluster) []masterUse {
	out := make([]masterUse, len(cl.Nodes))
	for i, n := range cl.Nodes {
		out[i] = masterUse{addr: n.Addr, cpu: processCPU(b, n.Pid()), commands: commandCount(b, n.Addr)}
	}
	return out
}

// processCPU is a process's user plus system CPU time (/proc/<pid>/stat, fields 14 and 15).
func processCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:])) // fields from the state on
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, raw)
	}
	const ticksPerSecond = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticksPerSecond
}

// commandCount is the calls of every command a server ran (INFO commandstats).
func commandCount(b *testing.B, addr string) int64 {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		_, rest, ok := strings.Cut(line, ":calls=")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			b.Fatalf("commandstats line %q", line)
		}
		total += n
	}
	return total
}
