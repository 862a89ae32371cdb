// Package app wires a jobguard process from its Config: the shared Redis client, the asynq client,
// server and inspector, the Fiber app with the API and the monitoring UI, and their shutdown.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gofiber/fiber/v2"
	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/app/admin"
	"github.com/jobguard/jobguard/app/auth"
	"github.com/jobguard/jobguard/app/cli"
	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/app/httpapi"
	"github.com/jobguard/jobguard/app/observe"
	"github.com/jobguard/jobguard/app/store"
	"github.com/jobguard/jobguard/history"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/guardstack"
	"github.com/jobguard/jobguard/middleware"
	"github.com/jobguard/jobguard/outbox"
	"github.com/jobguard/jobguard/schedule"
	"github.com/jobguard/jobguard/tasks"
	"github.com/jobguard/jobguard/web"
)

// Role says which parts of jobguard a process runs.
type Role string

// The roles: api (HTTP API and UI), worker (asynq server plus health and metrics endpoints), and
// all (both in one process, the development default).
const (
	RoleAll    Role = "all"
	RoleAPI    Role = "api"
	RoleWorker Role = "worker"
)

// ParseRole turns a command-line argument into a Role; "" is RoleAll.
func ParseRole(s string) (Role, error) {
	switch Role(s) {
	case "", RoleAll:
		return RoleAll, nil
	case RoleAPI, RoleWorker:
		return Role(s), nil
	}
	return "", fmt.Errorf("app: unknown role %q (want api, worker or nothing for both)", s)
}

func (r Role) serves(part Role) bool { return r == RoleAll || r == part }

// httpShutdownTimeout bounds how long open HTTP requests may take once a stop was asked for.
const httpShutdownTimeout = 5 * time.Second

// settleWait bounds how long a stop waits for the Idempotency-Key settlements of enqueues answered
// outcome_unknown (each ends a second past its request's deadline; one left is a key that runs out
// unanswered, as before settlements).
const settleWait = 3 * time.Second

// App is one jobguard process.
type App struct {
	cfg      config.Config
	role     Role
	log      zerolog.Logger
	rdb      redis.UniversalClient
	embedded *miniredis.Miniredis
	sql      *pgxpool.Pool   // nil without DATABASE_URL
	history  *history.Writer // copies finished jobs to SQL; nil without DATABASE_URL

	client    *asynq.Client
	inspector *asynq.Inspector
	server    *asynq.Server
	guard     *middleware.Guard
	stack     *engine.Stack // the guard's, for the API (guardstack)
	mux       *asynq.ServeMux
	sched     *schedule.Scheduler // runs in worker roles; its overview is served in api roles

	http *fiber.App
	ln   net.Listener
	// admin serves /metrics and the probes on ADMIN_ADDR; nil when they are on http.
	admin   *fiber.App
	adminLn net.Listener
	worker  *admin.WorkerHealth // nil when the role runs no worker
	// streams ends the open event streams (GET /jobs/{id}/events) before the HTTP shutdown waits for them.
	streams     context.Context
	stopStreams context.CancelFunc
	api         *httpapi.API // nil when the role serves no API

	closeOnce sync.Once
}

// New connects to Redis (or starts the embedded one), builds every part the role needs and binds
// the HTTP listener, so Addr is known before Run. Close releases what New took if Run is not called.
func New(ctx context.Context, cfg config.Config, role Role, log zerolog.Logger) (_ *App, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Only a process that serves the UI needs its credentials off loopback.
	if role.serves(RoleAPI) && cfg.MonitoringUser == "" && !config.IsLoopback(cfg.HTTPAddr) {
		return nil, &config.Error{Var: "MONITORING_USER", Err: fmt.Errorf("the UI needs MONITORING_USER and MONITORING_PASSWORD when HTTP_ADDR (%s) is not a loopback address", cfg.HTTPAddr)}
	}
	a := &App{cfg: cfg, role: role, log: log.With().Str("role", string(role)).Logger()}
	a.streams, a.stopStreams = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	observe.RouteProcessLogs(a, a.log) // before the first dial: go-redis logs its failures
	a.rdb, a.embedded, err = store.OpenRedis(ctx, cfg, a.log)
	if err != nil {
		return nil, err
	}
	a.inspector = asynq.NewInspectorFromRedisClient(a.rdb)
	// The template is the library's first user: its workers run on a guard as any asynq
	// application would, and its API reaches the engine under it for what only HTTP needs.
	a.guard = middleware.New(a.rdb, middleware.Config{
		Prefix:            cfg.KeyPrefix,
		Concurrency:       cfg.WorkerConcurrency,
		LeaseTTL:          cfg.LeaseTTL,
		Retention:         cfg.JobRetention,
		RescueInterval:    cfg.RescueInterval,
		ReconcileInterval: cfg.ReconcileInterval,
		DurableReplicas:   cfg.DurableReplicas,
		DurableTimeout:    cfg.DurableTimeout,
		FairMetricKeys:    cfg.FairMetricKeys,
		Keys:              cfg.EncryptionKeys,
		Logger:            &a.log,
		OnRescuePass: func(err error) {
			if a.worker != nil {
				a.worker.Passed(err)
			}
		},
	})
	a.stack = guardstack.Of(a.guard)
	// Concurrent requests' enqueues share pipelines (group commit).
	a.client = a.stack.EnqueueClient()
	if err := a.stack.SyncClock(ctx); err != nil {
		return nil, err
	}
	// Before any enqueue or worker: every role routes a sharded queue's jobs alike.
	shards, err := shardQueues(ctx, a.guard, cfg)
	if err != nil {
		return nil, err
	}
	if off := a.stack.ClockOffset(); off > time.Second || off < -time.Second {
		a.log.Warn().Dur("offset", off).Msg("Redis's clock is more than 1s from this host's; enqueue deadlines use the measured offset")
	}
	if a.sql, err = store.OpenSQL(ctx, cfg); err != nil {
		return nil, err
	}
	if a.sql != nil {
		// Finished jobs are copied to SQL, so a short JOB_RETENTION keeps their history.
		a.history = history.NewWriter(a.sql, a.stack, a.log)
		a.stack.OnEnd(a.history.Add)
		a.stack.OnCancelRunning(store.CancelFenceHook(a.sql, cfg.Tasks))
	}
	deps := cfg.TaskDeps()
	deps.SQL = a.sql
	a.mux = tasks.Protect(a.guard, deps, cfg.Tasks)
	a.sched, err = schedule.New(a.stack, a.client, cfg.AllSchedules(), schedule.Config{LeaseTTL: cfg.LeaseTTL, Build: config.BuildJob(cfg.Tasks), Logger: &a.log})
	if err != nil {
		return nil, &config.Error{Var: "SCHEDULES", Err: err}
	}

	hm := httpapi.NewMetrics()
	// HTTP_ADDR serves the API and UI, and the admin endpoints without ADMIN_ADDR: a worker whose
	// admin endpoints moved there has nothing for it, so it does not listen on it at all.
	if role.serves(RoleAPI) || cfg.AdminAddr == "" {
		a.http = httpapi.NewServer(cfg, a.log, hm)
	}
	ping := func(ctx context.Context) error { return a.rdb.Ping(ctx).Err() }
	own := append(hm.Collectors(), a.guard.Collectors()...)
	reg := observe.NewRegistry(append(own, a.sched.Collectors()...), a.inspector, ping)
	reg.MustRegister(buildInfoCollector(Build()))
	if role.serves(RoleWorker) {
		a.worker = admin.NewWorkerHealth(a.inspector, cfg.RescueInterval)
	}
	pr := admin.Probes{Ping: ping, Worker: a.worker}
	if cfg.AdminAddr != "" {
		a.admin = httpapi.NewServer(cfg, a.log, hm)
		admin.Routes(a.admin, pr, reg, nil)
		a.admin.Use(httpapi.Fallback(a.admin))
	} else {
		var guard fiber.Handler
		if len(cfg.APITokens) > 0 {
			guard = admin.MetricsToken(auth.NewTokens(cfg.APITokens))
		}
		admin.Routes(a.http, pr, reg, guard)
	}

	if role.serves(RoleAPI) {
		apiDeps := httpapi.Deps{
			Config: cfg, Log: a.log, Redis: a.rdb, Stack: a.stack, Client: a.client, Sched: a.sched, SQL: a.sql,
			Metrics: hm, Streams: a.streams,
		}
		if a.api, err = httpapi.Mount(a.http, apiDeps); err != nil {
			return nil, err
		}
		if err := web.Mount(a.http, a.rdb, web.Monitoring{
			User:     cfg.MonitoringUser,
			Password: cfg.MonitoringPassword,
			Loopback: config.IsLoopback(cfg.HTTPAddr),
			ReadOnly: cfg.MonitoringReadOnly,
			// asynqmon queries it for asynq_* series, which /metrics exports.
			PrometheusAddress: cfg.MonitoringPrometheus,
			Timeout:           cfg.RequestTimeout,
			// The UI's task actions act on jobs, and the jobs and schedules pages are served.
			Jobs: httpapi.MonitoringJobs(apiDeps),
		}); err != nil {
			return nil, &config.Error{Var: "MONITORING_USER", Err: err}
		}
	}
	if role.serves(RoleWorker) {
		// ServerConfig adds the stack's retry delays and failure test, and sets asynq's
		// DelayedTaskCheckInterval to 1 s: the floor of every bounce and retry delay.
		a.server = asynq.NewServerFromRedisClient(a.rdb, a.guard.ServerConfig(asynq.Config{
			Concurrency:     cfg.WorkerConcurrency,
			Queues:          middleware.ServerQueues(cfg.Queues, false, shards...),
			ShutdownTimeout: cfg.ShutdownTimeout,
			Logger:          observe.AsynqLogger(a.log),
			LogLevel:        observe.AsynqLevel(cfg.LogLevel),
		}))
	}
	if a.http != nil {
		a.http.Use(httpapi.Fallback(a.http)) // 405 for a known path's wrong method, else 404
		a.ln, err = net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			return nil, &config.Error{Var: "HTTP_ADDR", Err: err}
		}
	}
	if a.admin != nil {
		a.adminLn, err = net.Listen("tcp", cfg.AdminAddr)
		if err != nil {
			return nil, &config.Error{Var: "ADMIN_ADDR", Err: err}
		}
	}
	return a, nil
}

// AdminAddr is the address the admin listener (ADMIN_ADDR) is bound to, "" when there is none.
func (a *App) AdminAddr() string {
	if a.adminLn == nil {
		return ""
	}
	return a.adminLn.Addr().String()
}

// Addr is the address the HTTP listener is bound to (useful with HTTP_ADDR=127.0.0.1:0), "" when
// there is none (a worker with ADMIN_ADDR serves nothing on HTTP_ADDR).
func (a *App) Addr() string {
	if a.ln == nil {
		return ""
	}
	return a.ln.Addr().String()
}

// Redis is the process's shared client.
func (a *App) Redis() redis.UniversalClient { return a.rdb }

// Client is the process's asynq client, on the shared Redis client.
func (a *App) Client() *asynq.Client { return a.client }

// API is the HTTP API the process serves, nil when its role serves none.
func (a *App) API() *httpapi.API { return a.api }

// Run serves until ctx ends, then stops taking work, lets running handlers finish within
// SHUTDOWN_TIMEOUT and closes everything. A clean stop returns nil.
func (a *App) Run(ctx context.Context) error {
	defer a.Close()
	if a.server != nil {
		if err := a.server.Start(a.mux); err != nil {
			return fmt.Errorf("app: start worker: %w", err)
		}
		a.worker.Start()
	}
	rescueCtx, stopRescue := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRescue()
	// Every worker competes for the scheduler's lead; it stops with the rescuer.
	schedDone := make(chan struct{})
	if a.server != nil {
		go func() { defer close(schedDone); _ = a.sched.Run(rescueCtx) }()
	} else {
		close(schedDone)
	}
	// The history writer stops after the last handler returned, so every end is copied.
	historyCtx, stopHistory := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHistory()
	historyDone := make(chan struct{})
	if a.history != nil {
		go func() { defer close(historyDone); a.history.Run(historyCtx) }()
	} else {
		close(historyDone)
	}
	// With DATABASE_URL every worker competes to relay the outbox; it stops with the rescuer.
	relayDone := make(chan struct{})
	if a.server != nil && a.sql != nil {
		relay := &outbox.Relay{DB: a.sql, Stack: a.stack, Client: a.client, LeaseTTL: a.cfg.LeaseTTL, Log: a.log}
		go func() { defer close(relayDone); relay.Run(rescueCtx) }()
	} else {
		close(relayDone)
	}
	// Every worker rescues the jobs of lost workers and reconciles records with deliveries: the
	// guard's background loops, stopped with the scheduler.
	reconcileDone := make(chan struct{})
	if a.server != nil {
		a.worker.BeganPasses()
		go func() { defer close(reconcileDone); _ = a.guard.Run(rescueCtx) }()
	} else {
		close(reconcileDone)
	}
	httpErr := make(chan error, 2)
	if a.http != nil {
		go func() { httpErr <- a.http.Listener(a.ln) }()
	}
	if a.admin != nil {
		go func() { httpErr <- a.admin.Listener(a.adminLn) }()
	}
	a.log.Info().Str("addr", a.Addr()).Str("admin_addr", a.AdminAddr()).Int("concurrency", a.cfg.WorkerConcurrency).
		Strs("queues", a.cfg.QueueNames()).Bool("embedded_redis", a.cfg.Embedded()).Msg("jobguard started")

	var runErr error
	select {
	case <-ctx.Done():
		a.log.Info().Msg("stop requested: draining")
	case err := <-httpErr:
		runErr = fmt.Errorf("app: http server: %w", err)
	}

	stopRescue()
	<-reconcileDone
	<-schedDone
	<-relayDone
	var wg sync.WaitGroup
	if a.server != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Handlers cancelled from here on are requeued with their attempt given back. asynq
			// waits up to ShutdownTimeout for them, then cancels their contexts and requeues.
			a.guard.BeginShutdown()
			a.worker.Stop() // not ready from here on
			a.server.Shutdown()
			// A handler that ignores its context keeps its lease until it returns or the TTL
			// runs out; only leases of handlers that returned were released.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if n := a.stack.Wait(ctx); n > 0 {
				a.log.Warn().Int("running", n).Msg("handlers still running at exit; their leases expire on their own")
			}
		}()
	}
	a.stopStreams() // open event streams end now, or the shutdown below would wait for them
	if a.http != nil {
		if err := a.http.ShutdownWithTimeout(httpShutdownTimeout); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			a.log.Warn().Err(err).Msg("http shutdown")
		}
	}
	if a.admin != nil {
		if err := a.admin.ShutdownWithTimeout(httpShutdownTimeout); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			a.log.Warn().Err(err).Msg("admin http shutdown")
		}
	}
	if a.api != nil {
		// An enqueue answered outcome_unknown settles its Idempotency-Key just past its deadline.
		ctx, cancel := context.WithTimeout(context.Background(), settleWait)
		a.api.Settle(ctx)
		cancel()
	}
	wg.Wait()
	stopHistory()
	<-historyDone
	a.log.Info().Msg("jobguard stopped")
	return runErr
}

// Close releases Redis and the embedded server. It is safe to call more than once.
func (a *App) Close() {
	a.closeOnce.Do(func() {
		if a.stopStreams != nil {
			a.stopStreams()
		}
		if a.ln != nil {
			_ = a.ln.Close()
		}
		if a.adminLn != nil {
			_ = a.adminLn.Close()
		}
		if a.client != nil {
			_ = a.client.Close()
		}
		if a.inspector != nil {
			_ = a.inspector.Close()
		}
		if a.guard != nil {
			_ = a.guard.Close()
		}
		if a.rdb != nil {
			_ = a.rdb.Close()
		}
		if a.sql != nil {
			a.sql.Close()
		}
		if a.embedded != nil {
			a.embedded.Close()
		}
		observe.UnrouteProcessLogs(a)
	})
}

// Main is the whole program behind cmd/jobguard: args are the command-line arguments after the
// program name, lookup reads the environment. It returns the process exit code; configuration
// errors are one line on stderr naming the variable. Besides the roles it runs the subcommands
// version (-v, --version), help (-h, --help), migrate, and the operator CLI's healthcheck and
// jobs (app/cli, clients of the HTTP API), which start nothing. list is the task types the process
// runs (cmd/jobguard hands in tasks/registry's; a service's own binary or a test's probe its own):
// every role, subcommand and help sees list, and app knows no other.
func Main(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer, list []tasks.Task) int {
	env := cli.Env{Lookup: lookup, Stdout: stdout, Stderr: stderr, Version: Build().String()}
	if len(args) > 0 && args[0] == "jobs" {
		if len(args) > 1 && args[1] == "reencrypt" { // the key ring's pass on the stores, not an API request
			return runReencrypt(ctx, args[2:], lookup, stdout, stderr, list)
		}
		return cli.Jobs(ctx, args[1:], env)
	}
	if len(args) > 1 {
		fmt.Fprintln(stderr, usageLine)
		return 2
	}
	roleArg := ""
	if len(args) == 1 {
		roleArg = args[0]
	}
	switch roleArg {
	case "version", "--version", "-v":
		fmt.Fprintln(stdout, env.Version)
		return 0
	case "help", "-h", "--help":
		writeHelp(stdout, list)
		return 0
	case "migrate":
		return runMigrate(ctx, lookup, stdout, stderr, list)
	case "healthcheck":
		return cli.Healthcheck(ctx, env)
	}
	role, err := ParseRole(roleArg)
	if err != nil {
		fmt.Fprintln(stderr, "jobguard:", err)
		fmt.Fprintln(stderr, usageLine)
		return 2
	}
	cfg, err := config.FromLookup(lookup, list)
	if err != nil {
		fmt.Fprintln(stderr, "jobguard:", err)
		return 2
	}
	log := observe.NewLogger(cfg, stderr)
	if observe.TracingEnabled(lookup) {
		shutdown, err := observe.SetupTracing(ctx, log)
		if err != nil {
			fmt.Fprintln(stderr, "jobguard:", err)
			return 2
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = shutdown(sctx)
		}()
		log.Info().Msg("tracing on: spans are exported over OTLP/HTTP as the OTEL_* variables say")
	}
	a, err := New(ctx, cfg, role, log)
	if err != nil {
		fmt.Fprintln(stderr, "jobguard:", err)
		return 1
	}
	if err := a.Run(ctx); err != nil {
		log.Error().Err(err).Msg("jobguard failed")
		return 1
	}
	return 0
}
