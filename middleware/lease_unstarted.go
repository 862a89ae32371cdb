package middleware

import (
	"context"
	"errors"
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
// copy when it is of a lease-level type and never started: the task is marked adopting by the copy,
// the copy is enqueued, the mark becomes superseded (lease_rescue.lua). A failed enqueue takes the
// mark back; a mark whose removal failed too is finished by the next pass, which enqueues the same
// copy (asynq's task-id uniqueness makes that once). A task whose run ended but whose worker died
// before asynq's acknowledgement has no marker either: its copy runs it again, as asynq's own
// redelivery would have.
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
	c, fresh := continuation(t, info.ID)
	copyID, marked, err := runLeaseAdopt(ctx, g.rdb, k, adoptMark, fresh)
	if err != nil || !marked {
		return false // started (a marker), or Redis failed: the next pass looks again
	}
	log := g.log.With().Str("type", info.Type).Str("delivery", info.ID).Str("new_delivery", copyID).Logger()
	_, err = g.client.EnqueueContext(ctx, c, append(copyOptions(info), asynq.TaskID(copyID))...)
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) { // a conflict: an earlier pass enqueued it
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
		defer cancel()
		_, _, _ = runLeaseAdopt(uctx, g.rdb, k, adoptUndo, copyID)
		log.Warn().Err(err).Msg("copy of an unstarted task not enqueued; tried again next pass")
		return false
	}
	if _, adopted, err := runLeaseAdopt(ctx, g.rdb, k, adoptCommit, copyID); err != nil || !adopted {
		return false // the task started first (it runs; its copy finds it running or ended), or the next pass commits
	}
	g.m.rescues.WithLabelValues(info.Type).Inc()
	log.Info().Str("event", "rescued").Dur("since_seen", since).Msg("task taken by a worker that never started it handed to a copy")
	return true
}
