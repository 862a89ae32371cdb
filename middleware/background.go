package middleware

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/loop"
)

// Run keeps the guard's background loops until ctx ends: the rescuers (tasks of dead or paused
// workers get a new delivery within about the lease TTL, at both levels), the job level's
// deadline sweep, its reconciler (records and asynq's deliveries brought back in agreement), the
// workflows' repair pass (children of a node whose ending process died are released) and the
// fair admission layer's sweep (Stack.SweepFair).
// Run it in every worker process, beside the asynq server; it returns ctx's error.
func (g *Guard) Run(ctx context.Context) error {
	if err := g.stack.SyncClock(ctx); err != nil {
		g.log.Warn().Err(err).Msg("could not measure Redis's clock; using this process's")
	}
	insp := asynq.NewInspectorFromRedisClient(g.rdb)
	var wg sync.WaitGroup
	jobs := g.stack.NewRescuer(insp, g.client, g.cfg.RescueInterval).Serving(g.servedQueues)
	loops := []func(context.Context){
		func(ctx context.Context) {
			loop.Every(ctx, g.cfg.RescueInterval, func() { g.rescuePass(ctx, insp, jobs) })
		},
		g.stack.NewReconciler(insp, g.client, engine.ReconcilerConfig{Interval: g.cfg.ReconcileInterval}).Run,
		// The workflows' repair pass: what a process that died between a node's end and its
		// children's release left undone (engine.Stack.SweepWorkflows).
		func(ctx context.Context) {
			loop.Every(ctx, g.cfg.RescueInterval, func() {
				if _, err := g.stack.SweepWorkflows(ctx); err != nil && ctx.Err() == nil {
					g.log.Warn().Err(err).Msg("workflow sweep failed")
				}
			})
		},
		// The admission layer's sweep: what a process that died between an admission and its
		// delivery, or between a job's end and its admission's release, left undone.
		func(ctx context.Context) {
			loop.Every(ctx, g.cfg.RescueInterval, func() {
				if _, err := g.stack.SweepFair(ctx); err != nil && ctx.Err() == nil {
					g.log.Warn().Err(err).Msg("fair admission sweep failed")
				}
			})
		},
	}
	for _, loop := range loops {
		wg.Add(1)
		go func() { defer wg.Done(); loop(ctx) }()
	}
	wg.Wait()
	return ctx.Err()
}

// rescuePass is one pass of both rescuers (the job level's ends with its deadline sweep).
func (g *Guard) rescuePass(ctx context.Context, insp *asynq.Inspector, jobs *engine.Rescuer) {
	defer func() {
		// A pass must not take the process down (a Resource that panics on a payload of another
		// version's, say): the next pass tries again.
		if p := recover(); p != nil {
			g.log.Error().Str("event", "panic").Str("panic", fmt.Sprint(p)).Msg("rescue pass panicked")
		}
	}()
	_, err := jobs.Pass(ctx)
	if _, lerr := g.RescueLeases(ctx, insp); err == nil {
		err = lerr
	}
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		g.log.Warn().Err(err).Msg("rescue pass failed")
	}
	if g.cfg.OnRescuePass != nil {
		g.cfg.OnRescuePass(err)
	}
}

// RescueLeases is one pass of the lease level's rescuer (Run makes one every RescueInterval):
// each active task of a lease-level type whose run lost its lease (its worker died, or paused
// past the lease) is handed to a copy that asynq delivers at once, and the original's later
// redelivery is acknowledged without running. It walks the inspector's queues and those of the
// servers the guard configured (ServerConfig). It returns how many it rescued.
func (g *Guard) RescueLeases(ctx context.Context, insp *asynq.Inspector) (int, error) {
	rescued := 0
	served := g.servedQueues()
	unstarted := g.unstarted.Begin(insp)
	err := engine.WalkActive(ctx, g.rdb, insp, served, func(t *asynq.TaskInfo) {
		switch {
		case g.rescueLease(ctx, t):
			rescued++
		case !slices.Contains(served, t.Queue):
			// Not a queue of this process's servers: another application's task, maybe a plain
			// asynq one of the same type name, which a copy would run twice.
		default:
			if since, due := unstarted.Due(t.ID); due && g.rescueUnstartedLease(ctx, t, since) {
				rescued++
			}
		}
	})
	unstarted.End()
	if err != nil {
		return rescued, fmt.Errorf("middleware: rescue: %w", err)
	}
	return rescued, nil
}

// leaseOf is the lease-level protection a task runs under, if it runs under one.
func (g *Guard) leaseOf(t *asynq.Task, taskID string) (Lease, bool) {
	switch level, l, j := g.level(t.Type()); {
	case level == "lease":
		return l, true
	case level == "job" && !engine.IsDelivery(t):
		if j.Resource == nil {
			j.Resource = ownResource(taskID)
		}
		return Lease{Resource: j.Resource}, true
	}
	return Lease{}, false
}

func (g *Guard) rescueLease(ctx context.Context, info *asynq.TaskInfo) bool {
	t := asynq.NewTaskWithHeaders(info.Type, info.Payload, info.Headers)
	l, ok := g.leaseOf(t, info.ID)
	if !ok {
		return false
	}
	resource, err := resourceOf(l, t) // a Resource that panics on another version's payload
	if err != nil {
		return false
	}
	k := g.leaseKeys(resource, info.ID, "")
	if state, err := runLeaseRescue(ctx, g.rdb, k, ""); err != nil || state != "lost" {
		return false
	}
	copyID, err := g.enqueueCopy(ctx, info)
	if err != nil {
		g.log.Warn().Err(err).Str("delivery", info.ID).Msg("rescue copy not enqueued; tried again next pass")
		return false
	}
	// The copy runs only if this commit hands it the task; a run that came back meanwhile keeps it.
	if state, err := runLeaseRescue(ctx, g.rdb, k, copyID); err != nil || state != "superseded" {
		return false
	}
	g.m.rescues.WithLabelValues(info.Type).Inc()
	g.log.Info().Str("event", "rescued").Str("type", info.Type).Str("delivery", info.ID).Str("new_delivery", copyID).
		Msg("task of a lost worker handed to a copy")
	return true
}

// enqueueCopy enqueues the copy that continues info: same type, payload, queue and limits.
func (g *Guard) enqueueCopy(ctx context.Context, info *asynq.TaskInfo) (string, error) {
	t := asynq.NewTaskWithHeaders(info.Type, info.Payload, info.Headers)
	return g.enqueueContinuation(ctx, t, info.ID, copyOptions(info)...)
}

// copyOptions are the enqueue options of a copy of info: its queue, the retries it had left, its
// timeout, deadline and retention.
func copyOptions(info *asynq.TaskInfo) []asynq.Option {
	opts := []asynq.Option{asynq.Queue(info.Queue), asynq.MaxRetry(max(info.MaxRetry-info.Retried, 0))}
	if info.Timeout > 0 {
		opts = append(opts, asynq.Timeout(info.Timeout))
	}
	if !info.Deadline.IsZero() {
		opts = append(opts, asynq.Deadline(info.Deadline))
	}
	if info.Retention > 0 {
		opts = append(opts, asynq.Retention(info.Retention))
	}
	return opts
}
