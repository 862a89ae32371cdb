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

// The ways tenants share the handlers in runFairness.
const (
	// fifoMode: asynq's queue alone (B waits behind A's whole backlog).
	fifoMode = "fifo"
	// bounceMode: a concurrency cap of 2 per tenant at the start (Limit): A's excess bounces.
	bounceMode = "bounce"
	// admissionMode: Fair dispatch by tenant, capacity 8 (the two servers' handlers).
	admissionMode = "admission"
)

// runFairness runs the scenario on two servers (two Stacks on their own clients, 4 handlers each)
// with 10 ms handlers, in mode. B's probes are sent one after another, each once the previous
// one started (so each sees A's backlog, less what ran meanwhile).
func runFairness(t *testing.T, backlog, probes int, mode string) fairnessRun {
	db := redistest.NewDB(t)
	var aStarted atomic.Int64
	var mu sync.Mutex
	probeStart := map[string]time.Time{}
	probeA := map[string]int64{}
	tc := TaskConfig{Type: "tenant-work", MaxAttempts: 3}
	switch mode {
	case bounceMode:
		tc.Limit = Limit{Concurrency: 2, Key: func(s Spec) string { return s.Tenant }}
	case admissionMode:
		tc.Fair = &Fair{Capacity: 8}
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
	for range probes {
		at := time.Now()
		id := hs[0].enqueue(Spec{Type: "tenant-work", Tenant: "b", Payload: []byte("b")})
		deadline := time.Now().Add(120 * time.Second)
		for {
			mu.Lock()
			started, ok := probeStart[id]
			a := probeA[id]
			mu.Unlock()
			if ok {
				run.latencies = append(run.latencies, started.Sub(at))
				run.aBefore = append(run.aBefore, a)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("tenant B's job did not start within 120 s (%s)", mode)
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

func latencyFigures(d []time.Duration) (p50, p99, worst time.Duration) {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2], s[min(len(s)-1, len(s)*99/100)], s[len(s)-1]
}

// Fairness between tenants, side by side: asynq's FIFO, today's bounce-based cap per tenant, and
// the fair admission layer. With either fairness B's job starts while most of A's backlog is still
// queued; without, after A's whole backlog; with admission, without a bounce. The ordering is
// asserted, the latencies logged. JOBGUARD_FAIRNESS_BACKLOG sets A's backlog (default 600; the
// docs' figures were taken with 10000, `make bench-fair`) and JOBGUARD_FAIRNESS_PROBES the number
// of B's jobs, each sent once the previous started (default 1; FIFO always sends one).
func TestFairnessBetweenTenants(t *testing.T) {
	t.Parallel()
	backlog, probes := 600, 1
	if v, err := strconv.Atoi(os.Getenv("JOBGUARD_FAIRNESS_BACKLOG")); err == nil && v > 0 {
		backlog = v
	}
	if v, err := strconv.Atoi(os.Getenv("JOBGUARD_FAIRNESS_PROBES")); err == nil && v > 0 {
		probes = v
	}
	for _, mode := range []string{admissionMode, bounceMode, fifoMode} {
		n := probes
		if mode == fifoMode {
			n = 1
		}
		run := runFairness(t, backlog, n, mode)
		p50, p99, worst := latencyFigures(run.latencies)
		t.Logf("%s: A's backlog %d, B's %d jobs start latency p50 %s p99 %s max %s; A's jobs started before each: %v; "+
			"by then %d bounces for %d of A's starts (%.2f per job)",
			mode, backlog, n, p50.Round(time.Millisecond), p99.Round(time.Millisecond), worst.Round(time.Millisecond), run.aBefore,
			run.bounces, run.aStarted, float64(run.bounces)/float64(run.aStarted+int64(n)))
		first := run.aBefore[0]
		switch {
		case mode != fifoMode && first > int64(backlog)/2:
			t.Errorf("%s: B's job started after %d of A's %d jobs", mode, first, backlog)
		case mode == fifoMode && first < int64(backlog)*9/10:
			t.Errorf("without fairness B's job started after only %d of A's %d jobs (the queue is FIFO)", first, backlog)
		case mode == admissionMode && run.bounces != 0:
			t.Errorf("admission: %d bounces, want none", run.bounces)
		}
	}
}
