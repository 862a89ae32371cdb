package middleware

import (
	"context"
	"errors"
	"runtime"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/engine"
)

// ServerConfig returns c with the guard's retry decisions chained in front of the application's
// own, never in their place:
//   - RetryDelayFunc: a delay jobguard chose (a bounce, a job-level retry) is jobguard's; the
//     application's function (asynq's default when nil) decides every other delay, lease-level
//     types' failures included;
//   - IsFailure: a bounce is not a failure; the application's function decides the rest;
//   - ErrorHandler: the application's handler sees every error but bounces;
//   - DelayedTaskCheckInterval, when unset: 1 s (the floor of bounce delays; asynq's default is 5 s);
//   - TaskCheckInterval, when unset and a type protected before the call is dispatched fairly:
//     50 ms (asynq's 1 s made a sequence's next job wait up to 1.5 s for an idle processor);
//   - Concurrency, when unset: the guard's Concurrency; when the guard's is unset, the guard
//     bounds its job-level handlers by the server's (call ServerConfig before the server starts).
//
// The guard remembers c's Queues: Run's rescuers walk them besides the queues asynq lists, which
// are none after Redis restarted empty (asynq lists a queue once per process).
func (g *Guard) ServerConfig(c asynq.Config) asynq.Config {
	g.serve(c.Queues)
	appDelay := c.RetryDelayFunc
	if appDelay == nil {
		appDelay = asynq.DefaultRetryDelayFunc
	}
	c.RetryDelayFunc = func(n int, err error, t *asynq.Task) time.Duration {
		if d, ok := engine.DelayOf(err); ok {
			return d
		}
		if level, _, _ := g.level(t.Type()); level == "job" && engine.IsDelivery(t) {
			return engine.RetryDelay(n, err, t)
		}
		return appDelay(n, err, t)
	}
	appFailure := c.IsFailure
	c.IsFailure = func(err error) bool {
		if errors.Is(err, engine.ErrBounced) {
			return false
		}
		if appFailure != nil {
			return appFailure(err)
		}
		return err != nil
	}
	if appErrors := c.ErrorHandler; appErrors != nil {
		c.ErrorHandler = asynq.ErrorHandlerFunc(func(ctx context.Context, t *asynq.Task, err error) {
			if !errors.Is(err, engine.ErrBounced) {
				appErrors.HandleError(ctx, t, err)
			}
		})
	}
	if c.DelayedTaskCheckInterval == 0 {
		c.DelayedTaskCheckInterval = time.Second
	}
	if c.TaskCheckInterval == 0 && g.stack.HasFairTypes() {
		c.TaskCheckInterval = engine.FairTaskCheckInterval
	}
	if c.Concurrency == 0 && g.cfg.Concurrency > 0 {
		c.Concurrency = g.cfg.Concurrency
	}
	if g.cfg.Concurrency == 0 {
		n := c.Concurrency
		if n <= 0 {
			n = runtime.NumCPU() // asynq's default
		}
		g.stack.SetConcurrency(n)
	}
	return c
}
