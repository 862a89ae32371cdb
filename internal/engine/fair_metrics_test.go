package engine

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
)

// A scrape of the fair gauges with Redis stalled answers once its reads' deadline has passed,
// without the gauges, and shows them again once Redis answers; no ping goes before the reads.
func TestFairScrapeWithRedisStalledAnswersWithoutTheGauges(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	s := New(rdb, Config{Concurrency: 2, WorkerID: "w"})
	s.Register(TaskConfig{Type: "scraped", Fair: &Fair{Capacity: 1}}, func(ctx context.Context, j *Job) error { return nil })
	t.Cleanup(s.Close)
	client := asynq.NewClientFromRedisClient(rdb)
	for range 3 {
		if _, err := s.Enqueue(bg, client, Spec{Type: "scraped", Tenant: "t1"}); err != nil {
			t.Fatal(err)
		}
	}
	// admitted, waiting keys, capacity
	if n := testutil.CollectAndCount(s.m.fair); n != 3 {
		t.Fatalf("gauges with Redis answering: %d, want 3", n)
	}
	resume := srv.Stall(t)
	begin := time.Now()
	n := testutil.CollectAndCount(s.m.fair)
	took := time.Since(begin)
	resume()
	if n != 0 || took > 2*time.Second {
		t.Errorf("a scrape with Redis stalled: %d gauges after %s; want none, at the reads' deadline (%s)", n, took, fairScrapeTimeout)
	}
	if n := testutil.CollectAndCount(s.m.fair); n != 3 {
		t.Errorf("gauges once Redis answers again: %d, want 3", n)
	}
}
