package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/middleware"
)

// app is the application: its handlers, its middleware, its retry policy, and the guard that
// jobguard adds.
type app struct {
	rdb   *redis.Client
	log   zerolog.Logger
	guard *middleware.Guard // jobguard
	work  time.Duration     // how long a reservation takes (to let faults land mid-run)

	// What the application's own pieces saw, for its test.
	logged      atomic.Int64 // tasks its logging middleware wrapped
	retryAsked  atomic.Int64 // times its RetryDelayFunc was asked
	emailsTried atomic.Int64
	refused     atomic.Int64 // fenced writes refused to a run that had lost its lease
	// observe, when set, is told when a reservation's work starts and ends on a SKU.
	observe func(sku string, running bool)
}

func newApp(rdb *redis.Client, log zerolog.Logger, leaseTTL, work time.Duration) *app {
	a := &app{rdb: rdb, log: log, work: work}
	// jobguard: one guard, and how each protected type is protected.
	a.guard = middleware.New(rdb, middleware.Config{Prefix: "shop", LeaseTTL: leaseTTL, Logger: &a.log})
	a.guard.ProtectLease(typeReserve, middleware.Lease{Resource: skuOf})
	a.guard.ProtectJob(typeReport, middleware.Job{MaxAttempts: 3})
	return a
}

// mux is the application's mux: its logging middleware around everything, jobguard's inside it.
func (a *app) mux() *asynq.ServeMux {
	mux := asynq.NewServeMux()
	mux.Use(a.logging)
	mux.Use(a.guard.Middleware()) // jobguard
	mux.HandleFunc(typeReserve, a.reserve)
	mux.HandleFunc(typeReport, a.report)
	mux.HandleFunc(typeEmail, a.email)
	return mux
}

// serverConfig is the application's server configuration, with jobguard's decisions chained in.
func (a *app) serverConfig(concurrency int) asynq.Config {
	return a.guard.ServerConfig(asynq.Config{ // jobguard: ServerConfig chains, never replaces
		Concurrency: concurrency,
		LogLevel:    asynq.WarnLevel,
		RetryDelayFunc: func(n int, err error, t *asynq.Task) time.Duration {
			a.retryAsked.Add(1)
			return time.Second
		},
	})
}

// logging is the application's own middleware.
func (a *app) logging(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		a.logged.Add(1)
		start := time.Now()
		err := next.ProcessTask(ctx, t)
		id, _ := asynq.GetTaskID(ctx)
		a.log.Debug().Str("type", t.Type()).Str("task", id).Dur("took", time.Since(start)).AnErr("err", err).Msg("handled")
		return err
	})
}
