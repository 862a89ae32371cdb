package middleware

import (
	"context"
	"time"

	"github.com/hibiken/asynq"
)

// A worker killed after asynq handed it a lease-level task but before the lease start script ran
// leaves the task active with no run marker: no lease lapses, so rescueLease never sees it, and
// only asynq's recoverer (60-120 s) brought it back. The job level closed that gap with its
// unstarted rescue; the lease level shares its watch (engine.UnstartedWatch: active, listed by no
// live server for engine.UnstartedGrace) and hands such a task to a copy. Only tasks of the queues
// this process's servers serve are taken: another application's task of the same type name (a
// plain asynq one, say) would run twice.

// rescueUnstartedLease hands active task info, which no live server has listed for since, to a
// copy when it is of a lease-level type and never started. The task is marked handed to the copy
// before the copy is enqueued, so that a copy delivered at once finds it so, and the task itself,
// when asynq gives it back, is acknowledged without running; a failed enqueue takes the mark back.
// A task whose run ended but whose worker died before asynq's acknowledgement has no marker
// either: its copy runs it again, as asynq's own redelivery would have.
func (g *Guard) rescueUnstartedLease(ctx context.Context, info *asynq.TaskInfo, since time.Duration) bool {
	t := asynq.NewTaskWithHeaders(info.Type, info.Payload, info.Headers)
	l, ok := g.leaseOf(t, info.ID)
	if !ok {
		return false
	}
	resource, err := resourceOf(l, t)
	if err != nil {
		return false
	}
	k := g.leaseKeys(resource, info.ID, "")
	c, copyID := continuation(t, info.ID)
	if adopted, err := runLeaseAdopt(ctx, g.rdb, k, copyID, false); err != nil || !adopted {
		return false // started (a marker), or Redis failed: the next pass looks again
	}
	log := g.log.With().Str("type", info.Type).Str("delivery", info.ID).Str("new_delivery", copyID).Logger()
	if _, err := g.client.EnqueueContext(ctx, c, append(copyOptions(info), asynq.TaskID(copyID))...); err != nil {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
		defer cancel()
		_, _ = runLeaseAdopt(uctx, g.rdb, k, copyID, true)
		log.Warn().Err(err).Msg("copy of an unstarted task not enqueued; tried again next pass")
		return false
	}
	g.m.rescues.WithLabelValues(info.Type).Inc()
	log.Info().Str("event", "rescued").Dur("since_seen", since).Msg("task taken by a worker that never started it handed to a copy")
	return true
}
