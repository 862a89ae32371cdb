package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobguard/jobguard/app/auth"
	"github.com/jobguard/jobguard/app/problem"
)

// The admin endpoints: /metrics, /healthz and /readyz. They are served on ADMIN_ADDR when it is set
// (apart from the API: /metrics needs no token there, so keep that port off the public network),
// else on HTTP_ADDR, where /metrics needs one of API_TOKENS' tokens when they are set. The probes
// are always open: they tell nothing but up or down.

// readyTimeout bounds the whole of /readyz: the Redis ping and the look for the worker's heartbeat.
const readyTimeout = time.Second

// rescueStaleAfter is how old the rescuer's last finished pass may be before /healthz of a worker
// fails: a pass takes a few inspector calls, each bounded by the 3 s socket timeouts even when
// Redis stalls, so only a loop that stopped or hangs gets this far.
func rescueStaleAfter(interval time.Duration) time.Duration { return 30*time.Second + 3*interval }

// workerHealth is what the probes know about a worker's own parts: its asynq server (between Start
// and Shutdown, and its heartbeat in Redis) and its rescuer loop.
type workerHealth struct {
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

func newWorkerHealth(insp *asynq.Inspector, interval time.Duration) *workerHealth {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host" // asynq's own fallback, so the heartbeat's host matches
	}
	return &workerHealth{insp: insp, host: host, pid: os.Getpid(), interval: interval, now: time.Now}
}

// beganPasses notes that the guard's rescue loop starts now (Run).
func (w *workerHealth) beganPasses() { w.lastPass.Store(w.now().UnixNano()) }

// passed notes the end of one rescue pass (middleware.Config.OnRescuePass), so /healthz can tell
// a live loop from a stuck one.
func (w *workerHealth) passed(err error) {
	if err != nil {
		w.passFails.Add(1)
	} else {
		w.passFails.Store(0)
	}
	w.lastPass.Store(w.now().UnixNano())
}

func (w *workerHealth) live() error {
	last := w.lastPass.Load()
	if last == 0 {
		return nil // not started yet: Run starts it with the server
	}
	if age := w.now().Sub(time.Unix(0, last)); age > rescueStaleAfter(w.interval) {
		return fmt.Errorf("the rescuer's last pass ended %s ago", age.Round(time.Second))
	}
	return nil
}

// heartbeatExpiry is how long asynq's server entry lives after a heartbeat (two 5 s intervals).
const heartbeatExpiry = 10 * time.Second

// start and stop bracket the asynq server's run: ready only in between.
func (w *workerHealth) start() {
	w.started.Store(w.now().UnixNano())
	w.running.Store(true)
}

func (w *workerHealth) stop() { w.running.Store(false) }

// ready is nil when the asynq server runs and its heartbeat is in Redis: asynq writes it every 5 s
// with a 10 s expiry, and the inspector lists only servers whose entry has not expired. In the
// first 10 s after the start the first heartbeat may not be written yet (asynq writes it from a
// goroutine of Start).
func (w *workerHealth) ready() error {
	if !w.running.Load() {
		return errors.New("the asynq server is not running")
	}
	if w.now().Sub(time.Unix(0, w.started.Load())) < heartbeatExpiry {
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

// probes answer /healthz and /readyz.
type probes struct {
	ping   func(context.Context) error
	worker *workerHealth // nil when the process runs no worker
}

// readyCheck is nil when Redis answers and, on a worker, its server heartbeats, all within
// readyTimeout; the inspector's calls take no context, so they run aside and are waited for no
// longer (the socket timeouts end them).
func (p probes) readyCheck(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := p.ping(ctx); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("redis did not answer within %s: %w", readyTimeout, err)
		}
		return fmt.Errorf("redis: %w", err)
	}
	if p.worker == nil {
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- p.worker.ready() }()
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
func (p probes) routes(f *fiber.App) {
	f.Get("/healthz", func(c *fiber.Ctx) error {
		if p.worker != nil {
			if err := p.worker.live(); err != nil {
				return &problem.HTTPError{Status: http.StatusServiceUnavailable, Code: problem.CodeNotLive, Detail: "worker: " + err.Error(), Err: err}
			}
		}
		return c.JSON(fiber.Map{"status": "ok"})
	})
	f.Get("/readyz", func(c *fiber.Ctx) error {
		if err := p.readyCheck(c.UserContext()); err != nil {
			return &problem.HTTPError{Status: http.StatusServiceUnavailable, Code: problem.CodeNotReady, Detail: err.Error(), Err: err}
		}
		return c.JSON(fiber.Map{"status": "ready"})
	})
}

// adminRoutes adds the admin endpoints to f; guard, when not nil, runs before /metrics.
func adminRoutes(f *fiber.App, p probes, reg *prometheus.Registry, guard fiber.Handler) {
	p.routes(f)
	if guard != nil {
		f.Use("/metrics", guard)
	}
	metricsRoute(f, reg)
}

// metricsToken makes /metrics on HTTP_ADDR ask for one of API_TOKENS' tokens (any tenant's), as
// the API does: the series name task types, queues and error rates of every tenant.
func metricsToken(tokens auth.Tokens) fiber.Handler {
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
