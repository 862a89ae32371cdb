package schedule

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/locking"
)

// Config configures a Scheduler; the zero value of each field means its documented default.
type Config struct {
	// LeaseTTL is the leader lease's TTL (default 30s): a leader that stops is replaced within
	// about LeaseTTL plus a tenth of it (the followers' retry interval).
	LeaseTTL time.Duration
	// Grace is how old a tick may be when a leader first deals with it and still get its job
	// whatever the catch-up policy (default 2×LeaseTTL + 10s, which covers a leader change);
	// older ticks are missed ticks, handled by the schedule's catch-up policy.
	Grace time.Duration
	// Poll is the longest time between two looks at the schedules (default 1s); a leader also
	// wakes at each due tick. Pauses and resumes take effect within it.
	Poll time.Duration
	// EnqueueTimeout bounds the enqueue of one tick's job (default 5s).
	EnqueueTimeout time.Duration
	// Build turns a schedule into the job spec its ticks enqueue (the app builds it from the task
	// type's request: payload decoded and validated). Required.
	Build func(Spec) (engine.Spec, error)
	// Logger receives leader changes and tick failures (default: no logging).
	Logger *zerolog.Logger
	// Clock gives the time the ticks are computed from (default the system clock).
	Clock locking.Clock
}

func (c Config) withDefaults() Config {
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 30 * time.Second
	}
	if c.Grace <= 0 {
		c.Grace = 2*c.LeaseTTL + 10*time.Second
	}
	if c.Poll <= 0 {
		c.Poll = time.Second
	}
	if c.EnqueueTimeout <= 0 {
		c.EnqueueTimeout = 5 * time.Second
	}
	if c.Logger == nil {
		nop := zerolog.Nop()
		c.Logger = &nop
	}
	if c.Clock == nil {
		c.Clock = locking.SystemClock
	}
	return c
}

// Scheduler creates the jobs of a set of schedules while it leads. Every process may have one:
// Overview and SetPaused work whether it runs or not.
type Scheduler struct {
	cfg     Config
	stack   *engine.Stack
	client  *asynq.Client
	insp    *asynq.Inspector
	locks   *locking.Client
	plans   []*plan
	leading atomic.Bool
	m       *metrics
	Stats   Stats
}

// ErrStale: a newer leader wrote a schedule's state; this one steps down.
var errStale = errors.New("schedule: a newer leader took over")

// New validates specs (names unique) and builds a scheduler that enqueues through stack and client.
func New(stack *engine.Stack, client *asynq.Client, specs []Spec, cfg Config) (*Scheduler, error) {
	cfg = cfg.withDefaults()
	if cfg.Build == nil {
		return nil, errors.New("schedule: Config.Build is required")
	}
	s := &Scheduler{cfg: cfg, stack: stack, client: client, locks: stack.Locks(), insp: asynq.NewInspectorFromRedisClient(stack.Locks().Redis())}
	seen := map[string]bool{}
	for i, sp := range specs {
		p, err := sp.compile()
		if err != nil {
			return nil, fmt.Errorf("schedule %d (%q): %w", i, sp.Name, err)
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("schedule %d (%q): %w", i, sp.Name, &FieldError{"name", "is another schedule's too"})
		}
		seen[p.Name] = true
		s.plans = append(s.plans, p)
	}
	s.m = newMetrics(s)
	return s, nil
}

// Leading reports whether this scheduler holds the leader lease now.
func (s *Scheduler) Leading() bool { return s.leading.Load() }

// Run competes for the leader lease and, while it holds it, creates the schedules' jobs, until
// ctx ends; then it releases the lease (best effort) and returns ctx's cause.
func (s *Scheduler) Run(ctx context.Context) error {
	if len(s.plans) == 0 {
		<-ctx.Done()
		return context.Cause(ctx)
	}
	// Published while it runs, so that processes without these specs list them; taken back
	// before Run returns.
	published := make(chan struct{})
	go func() { defer close(published); s.publish(ctx) }()
	defer func() { <-published }()
	keeper := s.locks.NewKeeper()
	defer keeper.Close()
	log := s.cfg.Logger
	retry := max(s.cfg.LeaseTTL/10, 20*time.Millisecond)
	for ctx.Err() == nil {
		lease, err := s.locks.TryAcquire(ctx, leaderResource, s.cfg.LeaseTTL)
		switch {
		case err == nil:
			s.Stats.LeaderChanges.Add(1)
			s.m.leaders.Inc()
			log.Info().Str("event", "schedule_leader_acquired").Int64("fencing_token", lease.Token).Msg("scheduler leader")
			lctx, stop := keeper.Keep(ctx, lease)
			s.leading.Store(true)
			err := s.lead(lctx, lease.Fence())
			s.leading.Store(false)
			stop()
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = lease.Release(rctx)
			cancel()
			log.Info().Str("event", "schedule_leader_lost").Err(err).Msg("scheduler leader no more")
		case !errors.Is(err, locking.ErrNotAcquired) && ctx.Err() == nil:
			log.Warn().Str("event", "schedule_leader_error").Err(err).Msg("scheduler lease")
		}
		// Followers retry at a jittered tenth of the TTL, so a lapsed lease is taken soon.
		wait(ctx, retry/2+rand.N(retry))
	}
	return context.Cause(ctx)
}

func wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// lead deals with the due ticks of every schedule until ctx ends (the lease lost, or Run
// stopped) or a newer leader is seen.
func (s *Scheduler) lead(ctx context.Context, f locking.Fence) error {
	for {
		sts, err := s.states(ctx)
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn().Str("event", "schedule_state_error").Err(err).Msg("schedule state")
		}
		now := s.cfg.Clock.Now()
		next := now.Add(s.cfg.Poll)
		for i, p := range s.plans {
			if err != nil || ctx.Err() != nil {
				break
			}
			if err := s.step(ctx, f, p, sts[i], now); errors.Is(err, errStale) {
				return err
			} else if err != nil && ctx.Err() == nil {
				s.cfg.Logger.Warn().Str("event", "schedule_tick_error").Str("schedule", p.Name).Err(err).Msg("schedule tick")
			}
			if t := p.Next(now); !t.IsZero() && t.Before(next) { // zero: no tick to wait for (it would poll every 5 ms)
				next = t
			}
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		wait(ctx, max(next.Sub(s.cfg.Clock.Now()), 5*time.Millisecond))
	}
}

// maxWalk bounds how many missed ticks one step counts; a longer outage of a very frequent
// schedule moves the cursor to the grace window at once.
const maxWalk = 1_000_000

// step deals with one schedule's ticks in (cursor, now].
func (s *Scheduler) step(ctx context.Context, f locking.Fence, p *plan, st state, now time.Time) error {
	if st.cursor.IsZero() {
		// A schedule never seen starts now: the ticks before it are nobody's.
		return s.write(ctx, f, p, fieldCursor, now.UnixMilli())
	}
	first := p.Next(st.cursor)
	if first.IsZero() || first.After(now) {
		return nil
	}
	// Ticks are counted once the cursor has moved past them: a step that fails before is done
	// again, and must not count them twice.
	if st.paused {
		n := len(p.Ticks(st.cursor, now, maxWalk))
		if err := s.write(ctx, f, p, fieldCursor, now.UnixMilli()); err != nil {
			return err
		}
		s.count(p.Name, OutcomePaused, n)
		return nil
	}
	horizon := now.Add(-s.cfg.Grace)
	if !first.After(horizon) {
		// A leader that stopped between a tick's job and its cursor write left the job one tick
		// past the cursor: that tick was dealt with, not missed.
		id, ok, err := s.created(ctx, p, first)
		if err != nil {
			return err
		}
		if ok {
			s.remember(ctx, p.Name, id, first)
			if err := s.write(ctx, f, p, fieldCursor, first.UnixMilli(), fieldLastAt, first.UnixMilli(), fieldLastJob, id); err != nil {
				return err
			}
			s.Stats.Existed.Add(1)
			st.lastJob = id
			if first = p.Next(first); first.IsZero() || first.After(now) {
				return nil
			}
		}
	}
	// Missed ticks (older than the grace) keep only the last MaxCatchUp; the rest are counted.
	var missed []time.Time
	nMissed := 0
	t := first
	for ; !t.IsZero() && !t.After(horizon) && nMissed < maxWalk; t = p.Next(t) {
		nMissed++
		missed = append(missed, t)
		if len(missed) > MaxCatchUp {
			missed = missed[1:]
		}
	}
	if nMissed == maxWalk {
		t = p.Next(horizon)
	}
	var due []time.Time
	switch p.CatchUp {
	case Latest:
		if len(missed) > 0 {
			due = missed[len(missed)-1:]
		}
	case All:
		due = missed
	}
	// The dropped ones count as missed when the cursor passes them: at once when no missed tick
	// is caught up, else with the first caught-up tick's write.
	dropped := nMissed - len(due)
	if dropped > 0 && len(due) == 0 {
		last := horizon
		if len(missed) > 0 {
			last = missed[len(missed)-1]
		}
		if err := s.write(ctx, f, p, fieldCursor, last.UnixMilli()); err != nil {
			return err
		}
		s.count(p.Name, OutcomeMissed, dropped)
		dropped = 0
	}
	passed := func() {
		s.count(p.Name, OutcomeMissed, dropped)
		dropped = 0
	}
	for ; !t.IsZero() && !t.After(now); t = p.Next(t) {
		due = append(due, t)
	}
	lastJob := st.lastJob
	for _, tick := range due {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if p.Overlap != Allow && lastJob != "" {
			running, err := s.running(ctx, lastJob)
			if err != nil {
				return err
			}
			if running && p.Overlap == Replace {
				if err := s.replace(ctx, p, lastJob, tick); err != nil {
					return err
				}
			} else if running {
				if err := s.write(ctx, f, p, fieldCursor, tick.UnixMilli()); err != nil {
					return err
				}
				s.count(p.Name, OutcomeSkippedOverlap, 1)
				passed()
				continue
			}
		}
		id, err := s.enqueue(ctx, p, tick)
		if err != nil {
			return err
		}
		lastJob = id
		// The job exists: record it even if the lead ends now (the write is fenced all the same).
		// It is listed first, so that a state naming it as the last job is never ahead of the list.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		s.remember(wctx, p.Name, id, tick)
		err = s.write(wctx, f, p, fieldCursor, tick.UnixMilli(), fieldLastAt, tick.UnixMilli(), fieldLastJob, id)
		cancel()
		if err != nil {
			return err
		}
		passed()
	}
	return nil
}

// created reports whether tick's job exists, confirmed, and its id.
func (s *Scheduler) created(ctx context.Context, p *plan, tick time.Time) (string, bool, error) {
	spec, err := s.cfg.Build(p.Spec)
	if err != nil {
		return "", false, fmt.Errorf("schedule %q: build job: %w", p.Name, err)
	}
	id := TickJobID(p.Name, spec.Resource, tick)
	v, err := s.stack.Get(ctx, id)
	switch {
	case errors.Is(err, engine.ErrJobNotFound):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("schedule %q: tick %s: %w", p.Name, tick.UTC().Format(time.RFC3339), err)
	}
	return id, v.Record.Confirmed, nil
}

// running reports whether job id has not ended (an expired record has).
func (s *Scheduler) running(ctx context.Context, id string) (bool, error) {
	v, err := s.stack.Get(ctx, id)
	if errors.Is(err, engine.ErrJobNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("schedule: last job: %w", err)
	}
	return !v.Record.Status.Terminal(), nil
}

// TickJobID is the id of the job of schedule name's tick at, for a job on resource ("" when
// the task's job has no resource of its own: then the resource is schedule:<name>, so two
// ticks of one schedule never run at once).
func TickJobID(name, resource string, at time.Time) string {
	if resource == "" {
		resource = "schedule:" + name
	}
	return jobstore.DerivedJobID(resource, at, "schedule:"+name)
}

// enqueue creates the tick's job; a job another leader created for it counts as created here.
func (s *Scheduler) enqueue(ctx context.Context, p *plan, tick time.Time) (string, error) {
	spec, err := s.cfg.Build(p.Spec)
	if err != nil {
		return "", fmt.Errorf("schedule %q: build job: %w", p.Name, err)
	}
	if spec.Resource == "" {
		spec.Resource = "schedule:" + p.Name
	}
	spec.JobID = TickJobID(p.Name, spec.Resource, tick)
	spec.Dedup = nil // the tick is the job's identity
	ectx, cancel := context.WithTimeout(ctx, s.cfg.EnqueueTimeout)
	defer cancel()
	_, err = s.stack.Enqueue(ectx, s.client, spec)
	if errors.Is(err, asynq.ErrTaskIDConflict) && s.dropOrphan(ectx, spec) {
		_, err = s.stack.Enqueue(ectx, s.client, spec)
	}
	switch {
	case err == nil:
		s.count(p.Name, OutcomeEnqueued, 1)
		return spec.JobID, nil
	case errors.Is(err, engine.ErrJobExists):
		// Another leader's job, or the claim of an enqueue still in flight (or whose leader
		// died): only a confirmed job counts, else try again next round.
		v, gerr := s.stack.Get(ctx, spec.JobID)
		if gerr != nil || !v.Record.Confirmed {
			return "", fmt.Errorf("schedule %q: tick %s: job %s not confirmed yet", p.Name, tick.UTC().Format(time.RFC3339), spec.JobID)
		}
		s.Stats.Existed.Add(1)
		return spec.JobID, nil
	}
	return "", fmt.Errorf("schedule %q: tick %s: %w", p.Name, tick.UTC().Format(time.RFC3339), err)
}

// dropOrphan deletes the first delivery of the tick's job left by an enqueue that died between
// the delivery and the confirmation (a leader killed): the record it was for is gone (this
// enqueue could create it) and its claim ran out, so no enqueue can confirm it any more, and a
// worker would acknowledge it without running. An active one is left to finish (false).
func (s *Scheduler) dropOrphan(ctx context.Context, spec engine.Spec) bool {
	tc, ok := s.stack.TaskConfig(spec.Type)
	if !ok {
		return false
	}
	err := s.insp.DeleteTask(tc.Queue, jobstore.DeliveryID(spec.JobID, 1))
	if errors.Is(err, asynq.ErrTaskNotFound) {
		return true // a worker acknowledged it in between
	}
	if err != nil {
		s.cfg.Logger.Warn().Str("event", "schedule_orphan_delivery").Str("job_id", spec.JobID).Err(err).Msg("orphan delivery not deleted")
		return false
	}
	s.cfg.Logger.Info().Str("event", "schedule_orphan_delivery").Str("job_id", spec.JobID).Msg("orphan delivery deleted")
	return true
}

// write sets fields of p's state hash under the leader's fence.
func (s *Scheduler) write(ctx context.Context, f locking.Fence, p *plan, fields ...any) error {
	err := s.locks.SetFields(ctx, f, s.stateKey(p.Name), 0, fields...)
	if errors.Is(err, locking.ErrStaleToken) {
		return fmt.Errorf("%w: %w", errStale, err)
	}
	return err
}
