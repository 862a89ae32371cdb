package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
)

var (
	rescueScript   = mustScript("rescue.lua")
	unrescueScript = mustScript("unrescue.lua")
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
}

// NewRescuer returns a rescuer for the stack's task types; interval 0 means DefaultRescueInterval.
func (s *Stack) NewRescuer(insp *asynq.Inspector, client *asynq.Client, interval time.Duration) *Rescuer {
	if interval <= 0 {
		interval = DefaultRescueInterval
	}
	return &Rescuer{s: s, insp: insp, client: client, interval: interval}
}

// Run rescues every interval until ctx ends.
func (r *Rescuer) Run(ctx context.Context) {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := r.Pass(ctx); err != nil && ctx.Err() == nil {
				r.s.log.Warn().Err(err).Msg("rescue pass failed")
			}
		}
	}
}

// Pass looks at every active delivery once and returns how many jobs it rescued (or failed).
func (r *Rescuer) Pass(ctx context.Context) (int, error) {
	queues, err := r.insp.Queues()
	if err != nil {
		return 0, fmt.Errorf("engine: rescue: list queues: %w", err)
	}
	rescued := 0
	for _, q := range queues {
		for page := 1; ; page++ {
			active, err := r.insp.ListActiveTasks(q, asynq.PageSize(500), asynq.Page(page))
			if err != nil {
				return rescued, fmt.Errorf("engine: rescue: list active tasks of %s: %w", q, err)
			}
			for _, t := range active {
				if r.rescue(ctx, t) {
					rescued++
				}
			}
			if len(active) < 500 {
				break
			}
		}
	}
	return rescued, nil
}

func (r *Rescuer) rescue(ctx context.Context, t *asynq.TaskInfo) bool {
	jobID := t.Headers[HeaderJobID]
	tc, known := r.s.TaskConfig(t.Type)
	keys, err := r.s.keysFor(jobID, "")
	if err != nil || !known {
		return false
	}
	now := time.Now()
	res, err := rescueScript.Run(ctx, r.s.rdb, []string{keys.record, keys.lease, keys.timeline},
		t.ID, now.UnixMilli(), ms(tc.LeaseTTL), ms(r.s.cfg.Retention), r.s.cfg.TimelineCap, r.s.cfg.WorkerID).Slice()
	if err != nil {
		r.s.log.Warn().Err(err).Str("job_id", jobID).Msg("rescue script failed")
		return false
	}
	log := r.s.log.With().Str("job_id", jobID).Str("delivery", t.ID).Str("worker_id", r.s.cfg.WorkerID).Logger()
	switch res[0].(string) {
	case "failed":
		r.s.Stats.Rescued.Add(1)
		r.s.Stats.Failed.Add(1)
		r.s.m.rescues.WithLabelValues(t.Type, "failed").Inc()
		r.s.m.deadLettered.WithLabelValues(t.Type).Inc()
		log.Warn().Str("event", "failed").Msg("worker lost during the last attempt")
		return true
	case "rescued":
	default:
		return false
	}
	delivery := res[1].(string)
	beat, _ := res[2].(int64)
	headers := map[string]string{}
	for k, v := range t.Headers {
		headers[k] = v
	}
	if err := r.s.deliver(ctx, r.client, tc, jobID, delivery, headers[HeaderOpKey], headers[HeaderDedup], headers, 0); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = unrescueScript.Run(cctx, r.s.rdb, []string{keys.record}, delivery, t.ID).Err()
		log.Warn().Err(err).Msg("rescue delivery not enqueued; put back for the next pass")
		return false
	}
	r.s.Stats.Rescued.Add(1)
	r.s.m.rescues.WithLabelValues(t.Type, "rescued").Inc()
	latency := now.Sub(time.UnixMilli(beat).Add(tc.LeaseTTL))
	r.s.observeRescue(latency)
	log.Info().Str("event", "rescued").Str("new_delivery", delivery).Dur("since_lease_lapsed", latency).Msg("job of a lost worker redelivered")
	return true
}
