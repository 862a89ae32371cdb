package history

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/pgtest"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// BenchmarkHistoryFootprint runs max(b.N, 2,000) no-op jobs to done (10 tenants, each job on a
// resource of its own, as BenchmarkRetainedJobMemory does) twice on a Redis server of its own,
// once without the history and once with a writer copying every job to PostgreSQL, and reports
// what each finished job keeps in Redis for JOB_RETENTION both ways (used_memory growth, MEMORY
// USAGE of every key and of records and timelines) and what its history row takes in PostgreSQL
// (pg_total_relation_size of jobguard_job_history, its indexes and TOAST, per row). A warm-up run
// on a third database loads the scripts first, so neither side pays for the script cache. It
// asserts nothing about size; the figures back the README and docs/BENCHMARKS.md.
func BenchmarkHistoryFootprint(b *testing.B) {
	n := max(b.N, 2000)
	srv := redistest.Start(b)
	pool := pgtest.NewPool(b)
	if err := Migrate(bg, pool); err != nil {
		b.Fatal(err)
	}
	runJobs(b, srv, 2, nil, 100)
	off := runJobs(b, srv, 0, nil, n)
	on := runJobs(b, srv, 1, pool, n)
	b.ReportMetric(off.usedMemory/float64(n), "redis-off-used_memory-B/job")
	b.ReportMetric(on.usedMemory/float64(n), "redis-on-used_memory-B/job")
	b.ReportMetric(off.keys/float64(n), "redis-off-keys-B/job")
	b.ReportMetric(on.keys/float64(n), "redis-on-keys-B/job")
	b.ReportMetric(off.recordTimeline/float64(n), "redis-off-record+timeline-B/job")
	b.ReportMetric(on.recordTimeline/float64(n), "redis-on-record+timeline-B/job")

	var rows, heap, index, total, record, timeline int64
	err := pool.QueryRow(bg, `SELECT count(*), pg_relation_size('jobguard_job_history'), pg_indexes_size('jobguard_job_history'),
		pg_total_relation_size('jobguard_job_history'), sum(pg_column_size(record)), sum(pg_column_size(timeline))
		FROM jobguard_job_history`).Scan(&rows, &heap, &index, &total, &record, &timeline)
	if err != nil || rows != int64(n) {
		b.Fatalf("history rows %d of %d: %v", rows, n, err)
	}
	b.ReportMetric(float64(total)/float64(rows), "pg-total-B/row")
	b.ReportMetric(float64(heap)/float64(rows), "pg-heap-B/row")
	b.ReportMetric(float64(index)/float64(rows), "pg-indexes-B/row")
	if testing.Verbose() {
		for _, side := range []struct {
			name string
			fp   footprint
		}{{"off", off}, {"on", on}} {
			b.Logf("history %-3s: used_memory +%.0f B, %d keys %.0f B (records and timelines %.0f B) for %d jobs",
				side.name, side.fp.usedMemory, side.fp.count, side.fp.keys, side.fp.recordTimeline, n)
		}
		b.Logf("jobguard_job_history: %d rows, heap %d B, indexes %d B, total %d B; record %.0f B, timeline %.0f B per row (pg_column_size)",
			rows, heap, index, total, float64(record)/float64(rows), float64(timeline)/float64(rows))
	}
}

// footprint is what n finished jobs left in one Redis database.
type footprint struct {
	usedMemory     float64 // growth of INFO used_memory over the run
	recordTimeline float64 // MEMORY USAGE of the jobs' records and timelines
	keys           float64 // MEMORY USAGE of every key of the database (asynq's too)
	count          int     // and how many keys
}

// runJobs runs n no-op jobs to done on database dbn of srv; with db, a history writer copies
// each and runJobs waits for every copy before it measures. The run has a client of its own,
// closed before the measure: its connections are the process's, not the jobs'.
func runJobs(b *testing.B, srv *redistest.Server, dbn int, db *pgxpool.Pool, n int) footprint {
	rdb := srv.Client(b, dbn)
	before := usedMemory(b, rdb)
	run := srv.Client(b, dbn)
	s := engine.New(run, engine.Config{Concurrency: 10})
	s.Register(engine.TaskConfig{Type: "noop"}, func(context.Context, *engine.Job) error { return nil })
	var w *Writer
	ctx, stop := context.WithCancel(bg)
	done := make(chan struct{})
	if db != nil {
		w = NewWriter(db, s, zerolog.Nop())
		s.OnEnd(w.Add)
		go func() { defer close(done); w.Run(ctx) }()
	} else {
		close(done)
	}
	client := asynq.NewClientFromRedisClient(run)
	for i := 0; i < n; i++ {
		spec := engine.Spec{Type: "noop", Tenant: "t" + strconv.Itoa(i%10), Resource: fmt.Sprintf("r%d", i)}
		if _, err := s.Enqueue(bg, client, spec); err != nil {
			b.Fatal(err)
		}
	}
	worker := asynq.NewServerFromRedisClient(run, s.ServerConfig(asynq.Config{Concurrency: 10, Logger: testsupport.QuietAsynq{}, LogLevel: asynq.FatalLevel}))
	if err := worker.Start(s.Mux()); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for s.Stats.Succeeded.Load() < int64(n) || (w != nil && w.Copied.Load() < int64(n)) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d jobs done in time", s.Stats.Succeeded.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.BeginShutdown()
	worker.Shutdown()
	s.Close()
	stop()
	<-done
	_ = client.Close()
	_ = run.Close()
	var fp footprint
	fp.usedMemory = float64(usedMemory(b, rdb) - before)
	for _, k := range rdb.Keys(bg, "jobguard:*:job:*").Val() {
		fp.recordTimeline += float64(rdb.MemoryUsage(bg, k, 0).Val())
	}
	keys := rdb.Keys(bg, "*").Val()
	for _, k := range keys {
		fp.keys += float64(rdb.MemoryUsage(bg, k, 0).Val())
	}
	fp.count = len(keys)
	return fp
}

func usedMemory(b *testing.B, rdb *redis.Client) int64 {
	for _, line := range strings.Split(rdb.Info(bg, "memory").Val(), "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Fatal("no used_memory in INFO")
	return 0
}
