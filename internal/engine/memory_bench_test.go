package engine

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/benchfig"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/locking"
)

// BenchmarkRetainedJobMemory runs jobs to the end and reports the Redis bytes each finished job
// keeps for JOB_RETENTION: MEMORY USAGE of its record and timeline, its share of the list indexes,
// and the whole used_memory growth per job (which also counts what asynq keeps, the keys' dict and
// expiry entries, and the keys of the resources). Each job runs on a resource of its own, so the
// fence counters (no TTL: live data) are reported per resource, and so is a held lease. It
// asserts nothing about size; the figures back the README and docs/BENCHMARKS.md.
func BenchmarkRetainedJobMemory(b *testing.B) {
	retainedJobMemory(b, "", func(i int) Spec {
		return Spec{Type: "noop", Tenant: "t" + strconv.Itoa(i%10), Resource: fmt.Sprintf("r%d", i)}
	})
}

// BenchmarkRetainedJobMemoryOwnResource is make bench-peers' job shape: no tenant, no resource (the
// job is its own, so its fence counter is the job's and expires with it) and a 30 B payload.
func BenchmarkRetainedJobMemoryOwnResource(b *testing.B) {
	payload := []byte(`{"n":1,"pad":"xxxxxxxxxxxxxx"}`)
	retainedJobMemory(b, ", own resource, 30 B payload", func(int) Spec {
		return Spec{Type: "noop", Payload: payload}
	})
}

// retainedJobMemory runs max(b.N, 1000) jobs of spec(i) to done and reports their bytes by kind;
// shape names the jobs in the summary's rows.
func retainedJobMemory(b *testing.B, shape string, spec func(i int) Spec) {
	n := max(b.N, 1000)
	db := redistest.NewDB(b)
	before := usedMemory(b, db.Client)
	drainJobs(b, db, n, spec)
	after := usedMemory(b, db.Client)

	bytes, count := map[string]int64{}, map[string]int64{}
	keys := db.Client.Keys(bg, "*").Val()
	for _, k := range keys {
		kind := keyKind(k)
		bytes[kind] += db.Client.MemoryUsage(bg, k, 0).Val()
		count[kind]++
	}
	for kind, sum := range bytes {
		if kind == "fence" {
			b.ReportMetric(float64(sum)/float64(count[kind]), "fence-B/resource")
			continue
		}
		b.ReportMetric(float64(sum)/float64(n), kind+"-B/job")
	}
	b.ReportMetric(float64(after-before)/float64(n), "used_memory-B/job")
	per := func(kinds ...string) string {
		var sum int64
		for _, k := range kinds {
			sum += bytes[k]
		}
		return fmt.Sprintf("%d B", sum/int64(n))
	}
	// Go runs a benchmark with b.N = 1 before the -benchtime it was given: only a run of its own
	// size (b.N >= 1000, as make bench's 2000x) goes into the summary.
	if b.N < 1000 {
		return
	}
	for _, r := range []benchfig.Row{
		{Measure: "record + timeline per finished job", Jobguard: per("record", "timeline")},
		{Measure: "index entries per finished job", Jobguard: per("index")},
		{Measure: "used_memory growth per finished job", Jobguard: fmt.Sprintf("%d B", (after-before)/int64(n))},
	} {
		r.Benchmark, r.Baseline, r.Ratio = fmt.Sprintf("Redis memory, %d no-op jobs run to done%s", n, shape), "-", "-"
		benchfig.AddRow(r)
	}
	b.ReportMetric(float64(len(keys))/float64(n), "keys/job")
	b.ReportMetric(float64(leaseBytes(b, db)), "lease-B/resource")
	if testing.Verbose() {
		for kind, sum := range bytes {
			b.Logf("%-10s %6d keys %9d B", kind, count[kind], sum)
		}
		logOneRecord(b, db, keys)
	}
}

// leaseBytes is the MEMORY USAGE of one held lease (a job's resource while it runs).
func leaseBytes(b *testing.B, db redistest.DB) int64 {
	locks := locking.New(db.Client)
	l, err := locks.TryAcquire(bg, "lease-probe", time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = l.Release(bg) }()
	return db.Client.MemoryUsage(bg, locks.LeaseKey("lease-probe"), 0).Val()
}

// logOneRecord logs one finished record's key, size and fields: what the record bytes are made of.
func logOneRecord(b *testing.B, db redistest.DB, keys []string) {
	for _, k := range keys {
		if keyKind(k) != "record" {
			continue
		}
		b.Logf("record %s (%d B key, %d B in all): %v", k, len(k), db.Client.MemoryUsage(bg, k, 0).Val(), db.Client.HGetAll(bg, k).Val())
		return
	}
}

// drainJobs enqueues n no-op jobs of spec(i) and runs them all to done.
func drainJobs(b *testing.B, db redistest.DB, n int, spec func(i int) Spec) {
	s := New(db.Client, Config{Concurrency: benchConcurrency})
	s.Register(TaskConfig{Type: "noop"}, func(context.Context, *Job) error { return nil })
	client := asynq.NewClientFromRedisClient(db.Client)
	for i := 0; i < n; i++ {
		if _, err := s.Enqueue(bg, client, spec(i)); err != nil {
			b.Fatal(err)
		}
	}
	srv := asynq.NewServerFromRedisClient(db.Client, s.ServerConfig(asynq.Config{Concurrency: benchConcurrency}))
	if err := srv.Start(s.Mux()); err != nil {
		b.Fatal(err)
	}
	for s.Stats.Succeeded.Load() < int64(n) {
		time.Sleep(5 * time.Millisecond)
	}
	// The sweep that every rescue pass runs, which takes ended jobs out of the expiry index.
	if _, err := s.ExpireDue(bg); err != nil {
		b.Fatal(err)
	}
	s.BeginShutdown()
	srv.Shutdown()
	s.Close()
}

// keyKind groups keys by what they are: "record", "timeline", "index", "fence", "asynq", ...
func keyKind(k string) string {
	switch {
	case strings.HasPrefix(k, "asynq:"):
		return "asynq"
	case strings.HasSuffix(k, ":timeline"):
		return "timeline"
	case strings.Contains(k, ":job:"):
		return "record"
	}
	i := strings.LastIndex(k, "}")
	name := k[i+1:]
	name = strings.TrimPrefix(name, ":")
	if j := strings.IndexAny(name, ":"); j >= 0 {
		name = name[:j]
	}
	if name == "" {
		name = "index" // {jobs}, {jobs:<tenant>}, {expiry}: the key is its hash tag
	}
	return name
}

func usedMemory(b *testing.B, rdb *redis.Client) int64 {
	info := rdb.Info(bg, "memory").Val()
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Fatal("no used_memory in INFO")
	return 0
}
