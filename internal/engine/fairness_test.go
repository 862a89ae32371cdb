package engine

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
)

// fairnessRun is one fairness scenario: tenant A floods the queue with backlog jobs, then tenant
// B enqueues probes one after another; each probe's start latency (enqueue to handler) is measured, and
// how many of A's jobs had started when each probe did.
type fairnessRun struct {
	latencies []time.Duration
	aBefore   []int64
	aTotal    int
	// bounces and aStarted, when the last probe started: what the fairness cost A so far.
	bounces, aStarted int64
}

// runFairness runs the scenario on two servers (two Stacks on their own clients, 4 handlers each)
// with 10 ms handlers; fair caps each tenant at 2 running jobs (Limit per tenant), so A's excess
// bounces behind B's job.
func runFairness(t *testing.T, backlog, probes int, fair bool) fairnessRun {
	db := redistest.NewDB(t)
	var aStarted atomic.Int64
	var mu sync.Mutex
	probeStart := map[string]time.Time{}
	probeA := map[string]int64{}
	tc := TaskConfig{Type: "tenant-work", MaxAttempts: 3}
	if fair {
		tc.Limit = Limit{Concurrency: 2, Key: func(s Spec) string { return s.Tenant }}
	}
	var hs []*harness
	for i := range 2 {
		worker := redis.NewClient(&redis.Options{Addr: db.Server.Addr, DB: db.N, PoolSize: 20})
		t.Cleanup(func() { worker.Close() })
		hs = append(hs, newHarnessOn(t, db, worker, Config{Concurrency: 4, WorkerID: fmt.Sprintf("w%d", i)}, func(s *Stack) {
			s.Register(tc, func(ctx context.Context, j *Job) error {
				if string(j.Payload) == "b" {
					mu.Lock()
					probeStart[j.ID] = time.Now()
					probeA[j.ID] = aStarted.Load()
					mu.Unlock()
					return nil
				}
				aStarted.Add(1)
				select {
				case <-time.After(10 * time.Millisecond):
				case <-ctx.Done():
				}
				return nil
			})
		}))
	}
	// A's backlog, enqueued by 8 goroutines.
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(backlog) {
				if _, err := hs[0].stack.Enqueue(bg, hs[0].client, Spec{Type: "tenant-work", Tenant: "a", Payload: []byte("a")}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// B's jobs, enqueued one after another behind A's backlog.
	var run fairnessRun
	sent := map[string]time.Time{}
	var ids []string
	for range probes {
		at := time.Now()
		id := hs[0].enqueue(Spec{Type: "tenant-work", Tenant: "b", Payload: []byte("b")})
		sent[id] = at
		ids = append(ids, id)
	}
	for _, id := range ids {
		deadline := time.Now().Add(120 * time.Second)
		for {
			mu.Lock()
			at, ok := probeStart[id]
			a := probeA[id]
			mu.Unlock()
			if ok {
				run.latencies = append(run.latencies, at.Sub(sent[id]))
				run.aBefore = append(run.aBefore, a)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("tenant B's job did not start within 120 s (fair %v)", fair)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	run.aTotal = backlog
	run.aStarted = aStarted.Load()
	for _, h := range hs {
		run.bounces += h.stack.Stats.Bounces.Load()
	}
	return run
}

func latencyFigures(d []time.Duration) (p50, worst time.Duration) {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)-1]
}

// Fairness between tenants: with a per-tenant cap, tenant B's job starts while most of tenant A's
// backlog is still queued; without it, after A's whole backlog. The ordering is asserted, the
// latencies logged. JOBGUARD_FAIRNESS_BACKLOG sets A's backlog (default 600; the README's figures
// were taken with 10000) and JOBGUARD_FAIRNESS_PROBES the number of B's jobs, enqueued one after another behind it (default 1).
func TestFairnessBetweenTenants(t *testing.T) {
	t.Parallel()
	backlog, probes := 600, 1
	if v, err := strconv.Atoi(os.Getenv("JOBGUARD_FAIRNESS_BACKLOG")); err == nil && v > 0 {
		backlog = v
	}
	if v, err := strconv.Atoi(os.Getenv("JOBGUARD_FAIRNESS_PROBES")); err == nil && v > 0 {
		probes = v
	}
	for _, fair := range []bool{true, false} {
		run := runFairness(t, backlog, probes, fair)
		p50, worst := latencyFigures(run.latencies)
		t.Logf("fair=%v: A's backlog %d, B's %d jobs start latency p50 %s max %s; A's jobs started before each: %v; by then %d bounces for %d of A's starts",
			fair, backlog, probes, p50.Round(time.Millisecond), worst.Round(time.Millisecond), run.aBefore, run.bounces, run.aStarted)
		first := run.aBefore[0]
		switch {
		case fair && first > int64(backlog)/2:
			t.Errorf("with fairness B's job started after %d of A's %d jobs", first, backlog)
		case !fair && first < int64(backlog)*9/10:
			t.Errorf("without fairness B's job started after only %d of A's %d jobs (the queue is FIFO)", first, backlog)
		}
	}
}
