package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
	"github.com/jobguard/jobguard/locking"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// harness is a stack with a real asynq server in-process on a fresh database.
type harness struct {
	t      *testing.T
	rdb    *redis.Client
	stack  *Stack
	client *asynq.Client
	insp   *asynq.Inspector
	srv    *asynq.Server
}

func newHarness(t *testing.T, cfg Config, register func(s *Stack)) *harness {
	t.Helper()
	db := redistest.NewDB(t)
	return newHarnessOn(t, db, db.Client, cfg, register)
}

// newHarnessOn runs the stack and the asynq server on worker, a client of db (through a fault
// proxy, say); the harness's own client and enqueues use db directly.
func newHarnessOn(t *testing.T, db redistest.DB, worker *redis.Client, cfg Config, register func(s *Stack)) *harness {
	t.Helper()
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 4
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 5 * time.Second
	}
	s := New(worker, cfg)
	register(s)
	h := &harness{t: t, rdb: db.Client, stack: s, client: asynq.NewClientFromRedisClient(db.Client), insp: asynq.NewInspectorFromRedisClient(db.Client)}
	srvCfg := s.ServerConfig(asynq.Config{
		Concurrency: cfg.Concurrency, Queues: map[string]int{"default": 1},
		ShutdownTimeout: 2 * time.Second, Logger: testsupport.QuietAsynq{}, LogLevel: asynq.FatalLevel,
		// asynq's processor sleeps 0.5-1.5 TaskCheckInterval after finding the queues empty, which
		// delays both the pickup of a new task and Shutdown; a test harness can poll more often.
		TaskCheckInterval: 50 * time.Millisecond,
	})
	// Due retries and bounces move back to pending on this tick; the engine's 1 s floor of every
	// delay stays (minDelay), only the tick's lateness on top of it goes.
	srvCfg.DelayedTaskCheckInterval = 100 * time.Millisecond
	h.srv = asynq.NewServerFromRedisClient(worker, srvCfg)
	if err := h.srv.Start(s.Mux()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.stop)
	return h
}

func (h *harness) stop() {
	if h.srv == nil {
		return
	}
	h.stack.BeginShutdown()
	h.srv.Shutdown()
	h.srv = nil
	// asynq's Shutdown returns once it gave up on the handlers (requeued their deliveries and
	// cancelled their contexts); their own conclusions (the requeue of the record) still run.
	// The app waits for them the same way before it closes the stack.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	h.stack.Wait(ctx)
	h.stack.Close()
}

func (h *harness) enqueue(spec Spec) string {
	h.t.Helper()
	id, err := h.stack.Enqueue(context.Background(), h.client, spec)
	if err != nil {
		h.t.Fatal(err)
	}
	return id.JobID
}

// cancelRunning cancels job id while its handler runs, then fails the test unless what the
// handler writes once its context has ended (what, answered on late) is refused with
// locking.ErrStaleToken within 5 s.
func (h *harness) cancelRunning(id, what string, late <-chan error) {
	h.t.Helper()
	if _, err := h.stack.Cancel(context.Background(), id, CancelRequest{By: "test"}); err != nil {
		h.t.Fatal(err)
	}
	select {
	case err := <-late:
		if !errors.Is(err, locking.ErrStaleToken) {
			h.t.Fatalf("%s: %v, want ErrStaleToken", what, err)
		}
	case <-time.After(5 * time.Second):
		h.t.Fatal("the handler was not stopped")
	}
}

// waitStatus polls the job until it has status, or fails the test after within.
func (h *harness) waitStatus(id, status string, within time.Duration) View {
	h.t.Helper()
	deadline := time.Now().Add(within)
	for {
		v, err := h.stack.Get(context.Background(), id)
		if err == nil && v.Raw["status"] == status {
			return v
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("job %s not %s within %s: %v %+v", id, status, within, err, v)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func events(v View) []string {
	var out []string
	for _, e := range v.Timeline {
		out = append(out, e.Event)
	}
	return out
}

func has(v View, event string) bool {
	for _, e := range v.Timeline {
		if e.Event == event {
			return true
		}
	}
	return false
}

func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testsupport.Eventually(t, d, what, cond)
}

var bg = context.Background()

// fakeClock is an engine Clock the test moves by hand, for rules the engine decides in Go
// (debounce, rate-limit age, pending waits, rescue staleness). It starts at the real time, so
// records and Redis TTLs stay plausible. Lease validity stays on locking's own (real) clock.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	reads int
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Now()} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	return c.now
}

// Reads is how many times the engine asked the clock, to tell that a loop which reads it on
// each turn (awaitConfirmation's polling) is turning.
func (c *fakeClock) Reads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}

// Advance moves the clock forward by d.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
