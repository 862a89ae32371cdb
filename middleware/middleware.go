package middleware

import (
	"context"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/engine"
)

// Middleware is the guard as asynq middleware: mount it with mux.Use. It runs the handlers of
// protected types under their protection (the handler finds it with RunFrom) and passes every
// other task to its handler untouched.
func (g *Guard) Middleware() asynq.MiddlewareFunc {
	return func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			switch level, l, j := g.level(t.Type()); level {
			case "lease":
				return g.serveLease(ctx, t, next, l)
			case "job":
				return g.serveJob(ctx, t, next, j)
			}
			return next.ProcessTask(ctx, t)
		})
	}
}

// serveJob runs a job-level delivery through the engine; a task without a job (a plain asynq
// enqueue) runs at lease level instead.
func (g *Guard) serveJob(ctx context.Context, t *asynq.Task, next asynq.Handler, j Job) error {
	if !engine.IsDelivery(t) {
		return g.serveUnadopted(ctx, t, next, j)
	}
	return g.stack.Serve(ctx, t, func(ctx context.Context, job *engine.Job) error {
		// A delivery carries no payload: the job record's is authoritative (a replace may have
		// changed it). The task the handler gets has it.
		task := asynq.NewTaskWithHeaders(t.Type(), job.Payload, job.Headers)
		return next.ProcessTask(withRun(ctx, &Run{job: job}), task)
	})
}

// serveUnadopted runs a job-level type's task that came without jobguard's job headers at lease
// level, and says so: its producer should move to Guard.Enqueue.
func (g *Guard) serveUnadopted(ctx context.Context, t *asynq.Task, next asynq.Handler, j Job) error {
	id, _ := asynq.GetTaskID(ctx)
	g.m.unadopted.WithLabelValues(t.Type()).Inc()
	g.log.Warn().Str("event", "unadopted").Str("type", t.Type()).Str("delivery", id).
		Msg("job-level task enqueued without Guard.Enqueue: run at lease level, with no job record")
	resource, fenceTTL := j.Resource, time.Duration(0)
	if resource == nil {
		// The task is its own resource: its fence counter goes with the job records' retention.
		resource, fenceTTL = ownResource(id), g.retention()
	}
	ttl := j.LeaseTTL
	if ttl <= 0 {
		ttl = g.cfg.LeaseTTL
	}
	return g.serveLease(ctx, t, next, Lease{Resource: resource, TTL: ttl, AppliedTTL: j.AppliedTTL, FenceTTL: fenceTTL})
}

// retention is the job records' retention (Config.Retention, default 7 days).
func (g *Guard) retention() time.Duration {
	if g.cfg.Retention > 0 {
		return g.cfg.Retention
	}
	return 7 * 24 * time.Hour
}

// ownResource is the resource of a task that is its own: named by the first task of its chain of
// rescues, so that a rescue's copy takes the same lease and finds its original's run marker.
func ownResource(taskID string) func(*asynq.Task) (string, error) {
	return func(t *asynq.Task) (string, error) { return "task:" + rootOf(t, taskID), nil }
}
