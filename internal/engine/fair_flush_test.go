package engine

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/redistest"
)

// emptyFinds counts asynq's "All queues are empty" debug lines: each is its processor finding
// nothing to start and sleeping half to one and a half TaskCheckInterval, starting nothing.
type emptyFinds struct{ n atomic.Int64 }

func (e *emptyFinds) Debug(args ...any) {
	if strings.Contains(fmt.Sprint(args...), "All queues are empty") {
		e.n.Add(1)
	}
}
func (e *emptyFinds) Info(...any)  {}
func (e *emptyFinds) Warn(...any)  {}
func (e *emptyFinds) Error(...any) {}
func (e *emptyFinds) Fatal(...any) {}

// A fair type whose capacity equals its handlers, on asynq's default TaskCheckInterval (1 s): a
// handler's slot goes back to asynq only once its end has delivered the next admitted job, so
// asynq's processor finds it rather than an empty queue (and a sleep of 0.5-1.5 s per end: 157
// no-op jobs a second drained before, against 3,260 without fair dispatch).
func TestFairEndDeliversTheNextBeforeTheSlotIsFree(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	s := New(db.Client, Config{Concurrency: 1, LeaseTTL: 5 * time.Second})
	finds := &emptyFinds{}
	const jobs = 8
	drainOneKeyEach(t, db, s, TaskConfig{Type: "flush", Fair: &Fair{Capacity: 1}}, jobs,
		asynq.Config{Logger: finds, LogLevel: asynq.DebugLevel}, nil)
	// The last end finds the queue empty (nothing is left to admit); each of the others found
	// it empty before the fix.
	if n := finds.n.Load(); n > 1 {
		t.Fatalf("asynq's processor found the queue empty %d times while %d jobs of a backlog drained one at a time, want at most 1", n, jobs)
	}
}

// drainOneKeyEach registers tc on s with a handler that counts its runs, enqueues jobs of a key
// each, then runs them on one asynq server of one handler (logging as cfg says) until all ran,
// or fails the test after 30 s. beforeStart (nil: none) runs between the enqueues and the start.
func drainOneKeyEach(t *testing.T, db redistest.DB, s *Stack, tc TaskConfig, jobs int, cfg asynq.Config, beforeStart func()) {
	t.Helper()
	var ran atomic.Int64
	s.Register(tc, func(ctx context.Context, j *Job) error { ran.Add(1); return nil })
	client := asynq.NewClientFromRedisClient(db.Client)
	for i := range jobs {
		if _, err := s.Enqueue(bg, client, Spec{Type: tc.Type, Tenant: fmt.Sprintf("k%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if beforeStart != nil {
		beforeStart()
	}
	cfg.Concurrency, cfg.Queues, cfg.ShutdownTimeout = 1, map[string]int{"default": 1}, 2*time.Second
	srv := asynq.NewServerFromRedisClient(db.Client, s.ServerConfig(cfg))
	if err := srv.Start(s.Mux()); err != nil {
		t.Fatal(err)
	}
	defer func() { s.BeginShutdown(); srv.Shutdown(); s.Close() }()
	deadline := time.Now().Add(30 * time.Second)
	for ran.Load() < int64(jobs) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := ran.Load(); got != int64(jobs) {
		t.Fatalf("%d of %d jobs ran", got, jobs)
	}
}
