package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/loop"
)

// DefaultRescueInterval is how often a worker looks for jobs of dead workers.
const DefaultRescueInterval = 2 * time.Second

// Rescuer gives the jobs of dead or paused workers a new delivery within about the lease TTL,
// instead of waiting for asynq's own recovery (30 s task lease, 30 s cutoff, 1-minute recoverer:
// 60-120 s, spending a retry). It lists asynq's active tasks (at most the total concurrency of all
// workers), and for each whose job is processing with a lapsed lease and an old heartbeat, moves
// the job to retrying and enqueues delivery n+1. asynq's later redelivery of the old task finds it
// is no longer the job's current delivery and is acknowledged without running.
type Rescuer struct {
	s        *Stack
	insp     *asynq.Inspector
	client   *asynq.Client
	interval time.Duration
	served   func() []string
	// unstarted notes the active deliveries that no live server lists (rescue_unstarted.go).
	unstarted *UnstartedWatch
	passing   sync.Mutex // one pass at a time: unstarted keeps the last pass's
}

// NewRescuer returns a rescuer for the stack's task types; interval 0 means DefaultRescueInterval.
func (s *Stack) NewRescuer(insp *asynq.Inspector, client *asynq.Client, interval time.Duration) *Rescuer {
	if interval <= 0 {
		interval = DefaultRescueInterval
	}
	return &Rescuer{s: s, insp: insp, client: client, interval: interval, unstarted: NewUnstartedWatch(s.cfg.Clock)}
}

// Serving makes the rescuer also walk the queues served gives (the queues this process's server
// works on), which the inspector does not list after Redis restarted empty (WalkActive).
func (r *Rescuer) Serving(served func() []string) *Rescuer {
	r.served = served
	return r
}

// Run rescues every interval until ctx ends.
func (r *Rescuer) Run(ctx context.Context) {
	loop.Every(ctx, r.interval, func() {
		if _, err := r.Pass(ctx); err != nil && ctx.Err() == nil {
			r.s.log.Warn().Err(err).Msg("rescue pass failed")
		}
	})
}

// Pass looks at every active delivery once and returns how many jobs it rescued (or failed); then
// it runs the deadline sweep (Stack.ExpireDue), whose errors it returns too.
func (r *Rescuer) Pass(ctx context.Context) (int, error) {
	r.passing.Lock()
	defer r.passing.Unlock()
	var served []string
	if r.served != nil {
		served = r.served()
	}
	rescued := 0
	unstarted := r.unstarted.Begin(r.insp)
	err := WalkActive(ctx, r.s.rdb, r.insp, served, func(t *asynq.TaskInfo) {
		if r.rescue(ctx, t) {
			rescued++
		} else if since, due := unstarted.Due(t.ID); due && r.rescueUnstarted(ctx, t, since) {
			rescued++
		}
	})
	unstarted.End()
	if err != nil {
		return rescued, fmt.Errorf("engine: rescue: %w", err)
	}
	if _, err := r.s.ExpireDue(ctx); err != nil {
		return rescued, err
	}
	return rescued, nil
}

func (r *Rescuer) rescue(ctx context.Context, t *asynq.TaskInfo) bool {
	jobID := t.Headers[HeaderJobID]
	tc, known := r.s.TaskConfig(t.Type)
	keys, err := r.s.keysFor(jobID, "", t.Headers[HeaderDedup])
	if err != nil || !known {
		return false
	}
	now := r.s.now()
	res, err := r.s.store.Rescue(ctx, keys, t.ID, now, tc.LeaseTTL)
	if err != nil {
		r.s.log.Warn().Err(err).Str("job_id", jobID).Msg("rescue script failed")
		return false
	}
	log := r.s.log.With().Str("job_id", jobID).Str("delivery", t.ID).Str("worker_id", r.s.cfg.WorkerID).Logger()
	switch res.State {
	case jobstore.RescueFailed:
		r.s.Stats.Rescued.Add(1)
		r.s.Stats.Failed.Add(1)
		r.s.m.rescues.WithLabelValues(t.Type, "failed").Inc()
		r.s.m.deadLettered.WithLabelValues(t.Type).Inc()
		log.Warn().Str("event", "failed").Msg("worker lost during the last attempt")
		r.s.endedIn(jobID, t.Headers[HeaderWorkflow])
		return true
	case jobstore.RescuedBefore:
		return r.enqueueAgain(ctx, tc, t, res.Delivery)
	case jobstore.Rescued:
	default:
		return false
	}
	headers := map[string]string{}
	for k, v := range t.Headers {
		headers[k] = v
	}
	// A conflict: asynq holds the delivery already (a rescue of the job's unstarted delivery that
	// its record never adopted, sent back since), which the record now names: it runs as it comes.
	err = r.s.deliverTo(ctx, r.client, tc, r.s.recordQueue(tc.Queue, jobID, t.Queue), jobID, res.Delivery, headers[HeaderOpKey], headers[HeaderDedup], headers, 0)
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unrescueTimeout)
		defer cancel()
		_ = r.s.store.Unrescue(cctx, keys, res.Delivery, t.ID)
		log.Warn().Err(err).Msg("rescue delivery not enqueued; put back for the next pass")
		return false
	}
	r.s.Stats.Rescued.Add(1)
	r.s.m.rescues.WithLabelValues(t.Type, "rescued").Inc()
	latency := now.Sub(res.Heartbeat.Add(tc.LeaseTTL))
	r.s.observeRescue(latency)
	log.Info().Str("event", "rescued").Str("new_delivery", res.Delivery).Dur("since_lease_lapsed", latency).Msg("job of a lost worker redelivered")
	return true
}

// unrescueTimeout bounds putting a job back when its rescue's delivery was not enqueued.
const unrescueTimeout = 2 * time.Second

// enqueueAgain enqueues delivery, which an earlier rescue of active delivery t made the job's,
// when asynq lacks it: that rescue wrote the record, then Redis went away before its enqueue and
// its put-back. Without this the job waited for the reconciler's grace. A delivery asynq has (or
// had, and ran) is left alone; two rescuers enqueueing it meet asynq's task-id uniqueness.
func (r *Rescuer) enqueueAgain(ctx context.Context, tc TaskConfig, t *asynq.TaskInfo, delivery string) bool {
	jobID := t.Headers[HeaderJobID]
	queue := r.s.recordQueue(tc.Queue, jobID, t.Queue)
	_, err := taskState(ctx, r.insp, r.s.rdb, queue, delivery)
	if !errors.Is(err, asynq.ErrTaskNotFound) {
		return false // asynq has it, or could not say: the next pass asks again
	}
	headers := map[string]string{}
	for k, v := range t.Headers {
		headers[k] = v
	}
	log := r.s.log.With().Str("job_id", jobID).Str("delivery", t.ID).Str("worker_id", r.s.cfg.WorkerID).Logger()
	err = r.s.deliverTo(ctx, r.client, tc, queue, jobID, delivery, headers[HeaderOpKey], headers[HeaderDedup], headers, 0)
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		log.Warn().Err(err).Str("new_delivery", delivery).Msg("rescue delivery not enqueued again; next pass")
		return false
	}
	r.s.Stats.Rescued.Add(1)
	r.s.m.rescues.WithLabelValues(t.Type, "rescued").Inc()
	log.Info().Str("event", "rescued").Str("new_delivery", delivery).Msg("delivery of an earlier rescue, missing from asynq, enqueued")
	return true
}
