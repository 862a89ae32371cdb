// Package guardstack hands the template (app/) the engine under a middleware.Guard, for what only
// an HTTP API needs and the public API keeps internal: an enqueue that shares its round trip with
// the request's rate limit and Idempotency-Key claim (Spec.Alongside, Spec.Finally), listing,
// replay, the views. middleware registers the accessor at init; nothing else sets it.
package guardstack

import (
	"context"
	"fmt"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/engine"
)

var of func(guard any) *engine.Stack

// Register is middleware's: it says how to reach a guard's stack.
func Register(f func(guard any) *engine.Stack) { of = f }

// Of is the engine stack under guard (a *middleware.Guard).
func Of(guard any) *engine.Stack { return of(guard) }

var jobOf func(ctx context.Context) *engine.Job

// RegisterJobOf is middleware's: it says how to reach the engine's job of a run in ctx.
func RegisterJobOf(f func(ctx context.Context) *engine.Job) { jobOf = f }

// EngineHandler adapts a handler written against the engine's Job (the template's tests and
// probes, which read what the public Run does not show: limit tokens, the raw record) to a plain
// asynq handler under a guard's middleware. A task that runs without a job gets an error.
func EngineHandler(h engine.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		job := jobOf(ctx)
		if job == nil {
			return fmt.Errorf("guardstack: %s ran without a job", t.Type())
		}
		return h(ctx, job)
	})
}

// EngineHandlerOf adapts a task's handler constructor (tasks.Task.Handler's shape) the same way.
func EngineHandlerOf[D any](f func(D) engine.Handler) func(D) asynq.Handler {
	return func(d D) asynq.Handler { return EngineHandler(f(d)) }
}
