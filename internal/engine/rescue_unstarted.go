package engine

import (
	"context"
	"errors"
	"time"

	"github.com/hibiken/asynq"
)

// A worker killed between asynq's dequeue and the start script leaves its job queued (or
// retrying) with the delivery in asynq's active list: no lease lapses, so the rescue of a lost run
// never sees it, and the reconciler finds the delivery present. Only asynq's recoverer brought it
// back, 60-120 s later (make chaos-workflows found a fan-in waiting 61 s on one such leaf). The
// rescuer now gives such a delivery a new one once it has seen it active for UnstartedGrace while
// no live asynq server lists it among its workers (UnstartedWatch, which the lease level's rescuer
// shares). A live worker that starts it later still is refused at the start (its delivery is no
// longer the job's): nothing runs twice.

// rescueUnstarted gives active delivery t, which no live server has listed for UnstartedGrace
// (UnstartedWatch), a new delivery when its job never started it.
func (r *Rescuer) rescueUnstarted(ctx context.Context, t *asynq.TaskInfo, since time.Duration) bool {
	now := r.s.now()
	jobID := t.Headers[HeaderJobID]
	tc, known := r.s.TaskConfig(t.Type)
	keys, err := r.s.keysFor(jobID, "", t.Headers[HeaderDedup])
	if err != nil || !known {
		return false
	}
	// The next delivery is enqueued before the record names it: a worker that dequeues it in
	// between is sent back (untaken, start.lua) until the record takes it. A rescuer that dies in
	// between leaves a delivery sent back for untakenWait, then acknowledged as stale, not a record
	// whose delivery asynq lacks, which waits for the reconciler's grace (a chaos run saw such a
	// record wait 125 s).
	next, err := r.s.store.NextUnstartedDelivery(ctx, keys, jobID, t.ID)
	if err != nil || next == "" {
		return false
	}
	log := r.s.log.With().Str("job_id", jobID).Str("delivery", t.ID).Str("worker_id", r.s.cfg.WorkerID).Logger()
	headers := map[string]string{}
	for k, v := range t.Headers {
		headers[k] = v
	}
	err = r.s.deliver(ctx, r.client, tc, jobID, next, headers[HeaderOpKey], headers[HeaderDedup], headers, 0)
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) { // a conflict: enqueued by an earlier try
		log.Warn().Err(err).Str("new_delivery", next).Msg("rescue delivery not enqueued; next pass")
		return false
	}
	rescued, err := r.s.store.RescueUnstarted(ctx, keys, t.ID, next, now)
	if err != nil {
		log.Warn().Err(err).Msg("rescue script failed")
		return false
	}
	if !rescued {
		return false
	}
	r.s.Stats.Rescued.Add(1)
	r.s.m.rescues.WithLabelValues(t.Type, "rescued").Inc()
	log.Info().Str("event", "rescued").Str("new_delivery", next).Dur("since_seen", since).Msg("job taken by a worker that never started it redelivered")
	return true
}
