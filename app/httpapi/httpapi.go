// Package httpapi is jobguard's HTTP API: the enqueue, job, bulk, batch, workflow and event routes,
// their OpenAPI document, the operator routes, the monitoring UI's view of jobs, and the Fiber
// server's shared middleware (request IDs, logs, metrics, spans, deadlines, 404 and 405). The app
// package wires it into a process; nothing here knows about roles or shutdown.
package httpapi

import (
	"context"
	"fmt"

	"github.com/gofiber/fiber/v2"
	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/app/auth"
	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/schedule"
	"github.com/jobguard/jobguard/web"
)

// Deps is what the API needs from the process that serves it.
type Deps struct {
	Config  config.Config
	Log     zerolog.Logger
	Redis   redis.UniversalClient
	Stack   *engine.Stack
	Client  *asynq.Client
	Sched   *schedule.Scheduler
	SQL     *pgxpool.Pool // nil without DATABASE_URL
	Metrics *Metrics
	// Streams ends the open event streams when the process stops, before the HTTP shutdown waits for them.
	Streams context.Context
}

// API is the HTTP API a process serves.
type API struct {
	deps     Deps
	http     *fiber.App
	feeds    *feeds // the event streams' shared pollers and caps	// settling: the Idempotency-Key settlements running (idempotency_settle.go).
	settling *settlements
}

// Metrics is the HTTP server's request, idempotency and stream counters.
type Metrics struct{ hm *httpMetrics }

// NewMetrics makes the counters one process's Fiber servers share.
func NewMetrics() *Metrics { return &Metrics{hm: newHTTPMetrics()} }

// Collectors is what /metrics exports of them.
func (m *Metrics) Collectors() []prometheus.Collector { return m.hm.collectors() }

// NewServer is a Fiber app with the shared middleware (request ID, access log, metrics, spans,
// deadline, body limit) and the problem+json error handler.
func NewServer(cfg config.Config, log zerolog.Logger, m *Metrics) *fiber.App {
	return newFiber(cfg, log, m.hm)
}

// Fallback answers what no route took: 405 for a known path's wrong method, else 404. It is the last handler.
func Fallback(f *fiber.App) fiber.Handler { return fallback(f) }

// Mount adds the OpenAPI document, the job routes and the operator routes to f.
func Mount(f *fiber.App, d Deps) (*API, error) {
	cfg := d.Config
	// One limiter: what it saw of a budget (spent, or Redis failing) serves every route.
	limiter := newRateLimiter(d.Redis, cfg.KeyPrefix, cfg.RateLimit, cfg.RateLimitBurst, d.Log) // nil when RATE_LIMIT=0
	doc, err := apiDocument(cfg.Tasks)
	if err != nil {
		return nil, fmt.Errorf("app: the API's description: %w", err) // a bad `openapi` tag on a task's type
	}
	openAPIRoute(f, doc) // no token: the description is public
	a := &API{deps: d, http: f, feeds: newFeeds(d.Streams, d.Stack.Store(), eventsPoll, cfg.RequestTimeout, cfg.EventStreamsPerTenant, cfg.EventStreamsMax),
		settling: &settlements{}}
	(&api{
		stack: d.Stack, client: d.Client, tokens: auth.NewTokens(cfg.APITokens), operators: auth.NewTokens(cfg.OperatorTokens), tasks: cfg.Tasks, metrics: d.Metrics.hm, sql: d.SQL,
		streams: d.Streams,
		limiter: limiter,
		feeds:   a.feeds,
		idem: idempotency{rdb: d.Redis, prefix: cfg.KeyPrefix, retention: cfg.IdempotencyRetention, deadline: d.Stack.WriteDeadline,
			settling: a.settling},
	}).routes(f)
	operatorRoutes(f, d.Sched, auth.NewTokens(cfg.OperatorTokens), auth.NewTokens(cfg.APITokens), limiter.handler())
	return a, nil
}

// MonitoringJobs is the monitoring UI's view of jobs and schedules (web.Monitoring's Jobs).
func MonitoringJobs(d Deps) web.Jobs {
	return monitoringJobs{stack: d.Stack, client: d.Client, sched: d.Sched, decrypt: d.Config.MonitoringDecrypt}
}
