// Package admin serves a process's admin endpoints: /metrics, /healthz and /readyz, and what the
// probes know about a worker's own parts (WorkerHealth). It may import app/auth, app/problem and
// the library; nothing else of app.
package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/jobguard/jobguard/app/auth"
	"github.com/jobguard/jobguard/app/problem"
)

// The admin endpoints: /metrics, /healthz and /readyz. They are served on ADMIN_ADDR when it is set
// (apart from the API: /metrics needs no token there, so keep that port off the public network),
// else on HTTP_ADDR, where /metrics needs one of API_TOKENS' tokens when they are set. The probes
// are always open: they tell nothing but up or down.

// readyTimeout bounds the whole of /readyz: the Redis ping and the look for the worker's heartbeat.
const readyTimeout = time.Second

// RescueStaleAfter is how old the rescuer's last finished pass may be before /healthz of a worker
// fails: a pass takes a few inspector calls, each bounded by the 3 s socket timeouts even when
// Redis stalls, so only a loop that stopped or hangs gets this far.
func RescueStaleAfter(interval time.Duration) time.Duration { return 30*time.Second + 3*interval }

// WorkerHealth is what the probes know about a worker's own parts: its asynq server (between Start
// and Shutdown, and its heartbeat in Redis) and its rescuer loop.
type WorkerHealth struct {
	insp      *asynq.Inspector
	host      string
	pid       int
	interval  time.Duration
	now       func() time.Time
	running   atomic.Bool  // the asynq server was started and no shutdown has begun
	started   atomic.Int64 // unix ns of the server's start
	lastPass  atomic.Int64 // unix ns when the rescuer's loop started or last finished a pass
	passFails atomic.Int64 // passes in a row that returned an error (Redis down, ...)
}

// NewWorkerHealth watches the worker of this process (host and pid, as asynq names its server).
func NewWorkerHealth(insp *asynq.Inspector, interval time.Duration) *WorkerHealth {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host" // asynq's own fallback, so the heartbeat's host matches
	}
	return &WorkerHealth{insp: insp, host: host, pid: os.Getpid(), interval: interval, now: time.Now}
}

// BeganPasses notes that the guard's rescue loop starts now (Run).
func (w *WorkerHealth) BeganPasses() { w.lastPass.Store(w.now().UnixNano()) }

// Passed notes the end of one rescue pass (middleware.Config.OnRescuePass), so /healthz can tell
// a live loop from a stuck one.
func (w *WorkerHealth) Passed(err error) {
	if err != nil {
		w.passFails.Add(1)
	} else {
		w.passFails.Store(0)
	}
	w.lastPass.Store(w.now().UnixNano())
}

// Live is nil while the rescuer loop passes often enough (RescueStaleAfter), or has not started.
func (w *WorkerHealth) Live() error {
	last := w.lastPass.Load()
	if last == 0 {
		return nil // not started yet: Run starts it with the server
	}
	if age := w.now().Sub(time.Unix(0, last)); age > RescueStaleAfter(w.interval) {
		return fmt.Errorf("the rescuer's last pass ended %s ago", age.Round(time.Second))
	}
	return nil
}

// HeartbeatExpiry is how long asynq's server entry lives after a heartbeat (two 5 s intervals).
const HeartbeatExpiry = 10 * time.Second

// Start and Stop bracket the asynq server's run: ready only in between.
func (w *WorkerHealth) Start() {
	w.started.Store(w.now().UnixNano())
	w.running.Store(true)
}

func (w *WorkerHealth) Stop() { w.running.Store(false) }

// Ready is nil when the asynq server runs and its heartbeat is in Redis: asynq writes it every 5 s
// with a 10 s expiry, and the inspector lists only servers whose entry has not expired. In the
// first 10 s after the start the first heartbeat may not be written yet (asynq writes it from a
// goroutine of Start).
func (w *WorkerHealth) Ready() error {
	if !w.running.Load() {
		return errors.New("the asynq server is not running")
	}
	if w.now().Sub(time.Unix(0, w.started.Load())) < HeartbeatExpiry {
		return nil
	}
	servers, err := w.insp.Servers()
	if err != nil {
		return fmt.Errorf("list asynq servers: %w", err)
	}
	for _, s := range servers {
		if s.Host == w.host && s.PID == w.pid && s.Status == "active" {
			return nil
		}
	}
	return errors.New("the asynq server's heartbeat is not in Redis")
}

// Probes answer /healthz and /readyz.
type Probes struct {
	Ping   func(context.Context) error
	Worker *WorkerHealth // nil when the process runs no worker
}

// readyCheck is nil when Redis answers and, on a worker, its server heartbeats, all within
// readyTimeout; the inspector's calls take no context, so they run aside and are waited for no
// longer (the socket timeouts end them).
func (p Probes) readyCheck(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := p.Ping(ctx); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("redis did not answer within %s: %w", readyTimeout, err)
		}
		return fmt.Errorf("redis: %w", err)
	}
	if p.Worker == nil {
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- p.Worker.Ready() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("worker: %w", err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("worker: asynq's server list did not come within %s: %w", readyTimeout, ctx.Err())
	}
}

// routes adds /healthz (the process and its own loops work) and /readyz (it can take work now).
func (p Probes) routes(f *fiber.App) {
	f.Get("/healthz", func(c *fiber.Ctx) error {
		if p.Worker != nil {
			if err := p.Worker.Live(); err != nil {
				return &problem.HTTPError{Status: http.StatusServiceUnavailable, Code: problem.CodeNotLive, Detail: "worker: " + err.Error(), Err: err}
			}
		}
		return c.JSON(Health{Status: "ok"})
	})
	f.Get("/readyz", func(c *fiber.Ctx) error {
		if err := p.readyCheck(c.UserContext()); err != nil {
			return &problem.HTTPError{Status: http.StatusServiceUnavailable, Code: problem.CodeNotReady, Detail: err.Error(), Err: err}
		}
		return c.JSON(Health{Status: "ready"})
	})
}

// Routes adds the admin endpoints to f; guard, when not nil, runs before /metrics.
func Routes(f *fiber.App, p Probes, reg *prometheus.Registry, guard fiber.Handler) {
	p.routes(f)
	if guard != nil {
		f.Use("/metrics", guard)
	}
	metricsRoute(f, reg)
}

// MetricsToken makes /metrics on HTTP_ADDR ask for one of API_TOKENS' tokens (any tenant's), as
// the API does: the series name task types, queues and error rates of every tenant.
func MetricsToken(tokens auth.Tokens) fiber.Handler {
	return func(c *fiber.Ctx) error {
		token, ok := auth.BearerToken(c.Get(fiber.HeaderAuthorization))
		if _, known := tokens.Tenant(token); !ok || !known {
			c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="jobguard"`)
			return &problem.HTTPError{Status: http.StatusUnauthorized, Field: "Authorization",
				Detail: "a valid bearer token is required for /metrics on HTTP_ADDR (or serve it on ADMIN_ADDR)"}
		}
		return c.Next()
	}
}

// metricsRoute serves reg at /metrics.
func metricsRoute(f *fiber.App, reg *prometheus.Registry) {
	f.Get("/metrics", adaptor.HTTPHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
}

// SetClock replaces the clock the health checks read (tests move it past a limit).
func (w *WorkerHealth) SetClock(now func() time.Time) { w.now = now }

// LastPass is when the rescuer's loop started or last finished a pass (zero: not started).
func (w *WorkerHealth) LastPass() time.Time {
	if n := w.lastPass.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Health is the body of /healthz ("ok") and /readyz ("ready") when they pass (the API's
// description reflects it).
type Health struct {
	Status string `json:"status" openapi:"enum=ok|ready"`
}
