package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/hibiken/asynq"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/redact"
)

// The asynq adapter: what runs around a handler for each delivery. Order of the layers: slot
// (bounded concurrency) -> limit slot of the job's key (limits.go; a round trip of its own, in the
// key's slot) -> start script (stale-delivery check, lease + fence, attempt, status,
// already-applied, checkpoint) -> heartbeat (keeper) -> panic recovery -> handler -> finish script
// (status, idempotency commit, release) -> retry decision for asynq.

// unconfirmedWaits are the pauses before a delivery that found its job unconfirmed asks again.
var unconfirmedWaits = []time.Duration{5 * time.Millisecond, 20 * time.Millisecond, 75 * time.Millisecond}

// untakenWait is how long a delivery is sent back while its job's record has not taken it: a
// replay takes its delivery within 1.75 s of enqueueing it, a rescue of an unstarted delivery
// within one round trip, or never (its process died in between: the record keeps its delivery).
const untakenWait = 5 * time.Second

// untakenForget is how long an entry of Stack.untaken is kept: a delivery sent back here that then
// ran in another process, or ended, is never seen here again.
const untakenForget = time.Minute

// untakenFor is how long this process has seen delivery waiting for its record to take it.
func (s *Stack) untakenFor(delivery string) time.Duration {
	now := time.Now()
	first, seen := s.untaken.LoadOrStore(delivery, now)
	if !seen {
		// A new entry is rare (a replay or a rescue raced by a worker): the map is pruned then.
		s.untaken.Range(func(k, v any) bool {
			if now.Sub(v.(time.Time)) > untakenForget {
				s.untaken.Delete(k)
			}
			return true
		})
	}
	return now.Sub(first.(time.Time))
}

// startTimeout bounds the start script, on a context that outlives the delivery's.
const startTimeout = 5 * time.Second

func (s *Stack) wrap(r registered) asynq.HandlerFunc {
	return func(ctx context.Context, t *asynq.Task) error {
		err := s.serve(ctx, t, r.cfg, r.handler)
		if errors.Is(err, ErrNotADelivery) {
			// Not a jobguard delivery: nothing to protect or retry.
			return fmt.Errorf("%w: %w", err, asynq.SkipRetry)
		}
		return err
	}
}

// ErrNotADelivery: the task carries no job id of jobguard's (it was enqueued by a plain asynq
// client, not through the engine); nothing ran.
var ErrNotADelivery = errors.New("engine: not a jobguard delivery")

// IsDelivery reports whether t carries jobguard's job headers (Serve would run it as a job).
func IsDelivery(t *asynq.Task) bool { return t.Headers()[HeaderJobID] != "" }

// Serve runs one delivery of a registered type through the stack with handler h (the type's
// registered handler when h is nil). A task without jobguard's job headers gets ErrNotADelivery
// and nothing runs.
func (s *Stack) Serve(ctx context.Context, t *asynq.Task, h Handler) error {
	s.mu.Lock()
	r, ok := s.types[t.Type()]
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownType, t.Type())
	}
	if h == nil {
		h = r.handler
	}
	return s.serve(ctx, t, r.cfg, h)
}

func (s *Stack) serve(ctx context.Context, t *asynq.Task, tc TaskConfig, h Handler) (err error) {
	jobID, opKey := t.Headers()[HeaderJobID], t.Headers()[HeaderOpKey]
	delivery, _ := asynq.GetTaskID(ctx)
	keys, err := s.keysFor(jobID, opKey, t.Headers()[HeaderDedup])
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotADelivery, err)
	}
	ctx, span := startRunSpan(ctx, t, jobID, delivery)
	defer func() { endSpan(span, err) }()
	log := s.log.With().Str("job_id", jobID).Str("delivery", delivery).Str("type", tc.Type).Str("worker_id", s.cfg.WorkerID).
		Str("trace_id", traceID(span)).Logger()

	// Slot: released only when the handler returns, zombies included.
	if err := s.takeSlot(ctx, keys, delivery, tc, log); err != nil {
		return err
	}
	defer func() { <-s.sema }()

	owner := s.locks.NewOwner()
	lslot, st, sent, err := s.limitAndStart(ctx, t, keys, tc, delivery, owner, log)
	// The finish releases the slot in its round trip; a delivery that does not run, here.
	defer s.releaseLimit(ctx, lslot)
	if err != nil {
		return err
	}
	if st.State == jobstore.Run {
		s.untaken.Delete(delivery)
	}
	if wf := t.Headers()[HeaderWorkflow]; st.State == jobstore.Unconfirmed && wf != "" && s.abandonOrphanNode(ctx, keys, jobID, wf, log) {
		st.State = jobstore.Gone // acknowledged, its admission freed (workflow_orphans.go)
	}
	if st.State == jobstore.Untaken {
		if s.untakenFor(delivery) < untakenWait {
			return s.bounce(tc.Type, "untaken", 0, errors.New("the job's record has not taken this delivery yet"))
		}
		// The record did not take it in time: acknowledge it like any stale delivery.
		s.untaken.Delete(delivery)
		st.State = jobstore.Stale
	}
	if st.State != jobstore.Run {
		if st.State == jobstore.Applied || st.State == jobstore.Exhausted || st.State == jobstore.StartExpired {
			defer s.endedIn(jobID, t.Headers()[HeaderWorkflow]) // the start script ended it
		}
		if status, ended := endedBeforeRun(st); ended {
			// Its admission, if it holds one, is freed, and the next delivered before the slot is free.
			defer func() { awaitFairFlush(s.fairEnded(ctx, tc, jobID, status, t.Headers())) }()
		}
		return s.notRun(st, tc, log)
	}
	job := s.newJob(st, t, keys, tc, delivery, owner, sent)
	job.slot, job.limits = lslot, s.limits
	log = log.With().Int("attempt", job.Attempt).Str("lease_owner", owner).Int64("fencing_token", st.Token).Logger()
	span.SetAttributes(attribute.Int("jobguard.attempt", job.Attempt), attribute.Int64("jobguard.fencing_token", st.Token))
	s.Stats.Started.Add(1)
	s.m.lease.WithLabelValues(tc.Type, "acquired").Inc()
	s.m.transitions.WithLabelValues(tc.Type, "processing").Inc()
	if job.Attempt == 1 && !job.CreatedAt.IsZero() {
		s.m.queueWait.WithLabelValues(tc.Type).Observe(seconds(sent.Sub(job.CreatedAt)))
	}
	if err := s.openJob(job); err != nil {
		// Never a run on data that did not open, nor a silent skip: the job fails for good,
		// with the reason (a key id at most) on its record and timeline.
		s.m.undecryptable.WithLabelValues(tc.Type).Inc()
		return s.deadLetter(ctx, job, err.Error(), "job data cannot be decrypted: dead letter", log)
	}
	err = s.run(ctx, job, h, log)
	span.SetAttributes(attribute.String("jobguard.outcome", outcomeOf(err)))
	return err
}

// takeSlot waits up to SlotWait for one of the process's handler slots; a delivery that gets none
// bounces without spending an attempt.
func (s *Stack) takeSlot(ctx context.Context, keys jobstore.Keys, delivery string, tc TaskConfig, log zerolog.Logger) error {
	slot := time.NewTimer(s.cfg.SlotWait)
	defer slot.Stop()
	select {
	case s.sema <- struct{}{}:
		return nil
	case <-slot.C:
		s.event(ctx, keys, Event{Event: "bounced", Delivery: delivery, Detail: "no free slot in " + s.cfg.WorkerID})
		log.Info().Str("event", "bounced").Str("reason", "no_slot").Msg("no free slot")
		return s.bounce(tc.Type, "no_slot", 0, errors.New("no free slot"))
	case <-ctx.Done():
		return s.bounce(tc.Type, "cancelled", 0, context.Cause(ctx))
	}
}

// start runs the start script; a delivery that starts before its enqueuer's confirmation lands
// (about a round trip later) asks again a few times rather than bounce for a second. sent is when
// the last call was sent, the start of the lease's validity (locking's clock); the script's now
// (debounce, timestamps) is the engine's clock.
func (s *Stack) start(ctx context.Context, keys jobstore.Keys, delivery, owner string, tc TaskConfig, hasOpKey bool) (jobstore.Started, time.Time, error) {
	for try := 0; ; try++ {
		sent := s.locks.Now()
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
		wctx, span := scriptSpan(wctx, "jobguard.start")
		st, err := s.store.Start(wctx, keys, jobstore.StartArgs{
			Delivery: delivery, Owner: owner, LeaseTTL: tc.LeaseTTL, Now: s.now(), HasOpKey: hasOpKey,
		})
		endSpan(span, err)
		cancel()
		if err != nil || st.State != jobstore.Unconfirmed || try == len(unconfirmedWaits) {
			return st, sent, err
		}
		time.Sleep(unconfirmedWaits[try])
	}
}

// endedBeforeRun is the status of a job whose delivery the start script did not run because the
// job has ended (or is gone: ""), and whether it has.
func endedBeforeRun(st jobstore.Started) (jobstore.Status, bool) {
	switch st.State {
	case jobstore.Gone:
		return "", true
	case jobstore.Terminal:
		return jobstore.Status(st.Status), true
	case jobstore.Applied:
		return jobstore.StatusDone, true
	case jobstore.Exhausted:
		return jobstore.StatusFailed, true
	case jobstore.StartExpired:
		return jobstore.StatusExpired, true
	}
	return "", false
}

// notRun answers asynq for a delivery the start script did not run.
func (s *Stack) notRun(st jobstore.Started, tc TaskConfig, log zerolog.Logger) error {
	switch st.State {
	case jobstore.Gone, jobstore.Terminal, jobstore.Stale:
		s.Stats.StaleDeliveries.Add(1)
		s.m.staleDeliveries.WithLabelValues(tc.Type).Inc()
		log.Info().Str("event", "stale_delivery").Str("state", string(st.State)).Str("status", st.Status).
			Str("current", st.Current).Msg("delivery acknowledged without running")
		return nil
	case jobstore.StartExpired:
		s.countExpired(tc.Type, jobstore.ExpiredStartBy)
		log.Info().Str("event", "expired").Str("reason", jobstore.ExpiredStartBy).Msg("not started by its start_by; expired, not run")
		return nil
	case jobstore.Unconfirmed:
		return s.bounce(tc.Type, "unconfirmed", 0, errors.New("the job's enqueue is not confirmed yet"))
	case jobstore.StartHeld:
		return s.bounce(tc.Type, "held", 0, errors.New("the workflow's node is not released yet"))
	case jobstore.Debounce:
		return s.bounce(tc.Type, "debounce", st.Wait, errors.New("replaced payload waits for its debounce"))
	case jobstore.Busy:
		s.m.lease.WithLabelValues(tc.Type, "not_acquired").Inc()
		log.Info().Str("event", "lease_not_acquired").Dur("remaining", st.Wait).Msg("resource busy")
		return s.bounce(tc.Type, "lease_not_acquired", 0, errors.New("resource lease held by another worker"))
	case jobstore.Applied:
		s.Stats.AlreadyApplied.Add(1)
		s.m.alreadyApplied.WithLabelValues(tc.Type).Inc()
		s.m.transitions.WithLabelValues(tc.Type, "done").Inc()
		log.Info().Str("event", "already_applied").Msg("operation applied before; job done")
		return nil
	case jobstore.Exhausted:
		s.Stats.Failed.Add(1)
		s.m.deadLettered.WithLabelValues(tc.Type).Inc()
		s.m.transitions.WithLabelValues(tc.Type, "failed").Inc()
		log.Warn().Str("event", "failed").Msg("attempt budget spent")
		return fmt.Errorf("attempt budget spent: %w", asynq.SkipRetry)
	}
	return s.bounce(tc.Type, "start_failed", 0, fmt.Errorf("start script: unknown state %q", st.State))
}

// newJob is the handler's view of the run the start script granted.
func (s *Stack) newJob(st jobstore.Started, t *asynq.Task, keys jobstore.Keys, tc TaskConfig, delivery, owner string, sent time.Time) *Job {
	job := &Job{
		ID: t.Headers()[HeaderJobID], Type: tc.Type, Queue: s.queueOf(tc.Queue, t.Headers()[HeaderJobID]), Delivery: delivery, Payload: st.Payload,
		Attempt: st.Attempt, MaxAttempts: tc.MaxAttempts, OpKey: t.Headers()[HeaderOpKey], Headers: t.Headers(),
		Checkpoint: st.Checkpoint, CreatedAt: st.CreatedAt,
		locks: s.locks, rdb: s.rdb, durable: s.store.Durability(), clock: s.cfg.Clock, retention: s.cfg.Retention, keys: keys, tc: tc,
		ring:    s.cfg.Keys,
		parents: s.ParentResults,
	}
	job.lease = s.locks.Granted(keys.Tag, owner, st.Token, tc.LeaseTTL, sent)
	job.lease.StampHeartbeat(keys.Record, jobstore.FieldHeartbeatAt)
	return job
}

// openJob decrypts the payload and checkpoint the start script read (sealed ones only).
func (s *Stack) openJob(job *Job) (err error) {
	if job.Payload, err = s.openValue(job.ID, jobstore.FieldPayload, job.Payload); err != nil {
		return err
	}
	job.Checkpoint, err = s.openValue(job.ID, jobstore.FieldCheckpoint, job.Checkpoint)
	return err
}

// run runs the handler with its lease kept, and concludes.
func (s *Stack) run(ctx context.Context, job *Job, h Handler, log zerolog.Logger) error {
	runStart := time.Now()
	s.wg.Add(1)
	defer s.wg.Done()
	s.track(job, ctx)
	defer s.untrack(job)
	hctx, stop := s.keeper.Keep(ctx, job.lease)
	hctx, unwatch := s.limits.watch(hctx, job.slot)
	defer unwatch()
	rctx, settle, release := s.cancellable(ctx, hctx, job)
	defer release()
	herr := s.call(rctx, job, h, log)
	settle()
	stop()
	err := s.conclude(ctx, rctx, job, herr, log)
	s.m.duration.WithLabelValues(job.Type, outcomeOf(err)).Observe(seconds(time.Since(runStart)))
	return err
}

func (s *Stack) track(j *Job, ctx context.Context) {
	s.mu.Lock()
	s.running[j] = ctx
	s.mu.Unlock()
}

func (s *Stack) untrack(j *Job) {
	s.mu.Lock()
	delete(s.running, j)
	s.mu.Unlock()
}

// call runs the handler, turning a panic into an error that carries the stack.
func (s *Stack) call(ctx context.Context, job *Job, h Handler, log zerolog.Logger) (err error) {
	defer func() {
		if p := recover(); p != nil {
			s.Stats.Panics.Add(1)
			log.Error().Str("event", "panic").Str("panic", redact.String(fmt.Sprint(p))).Bytes("stack", debug.Stack()).Msg("handler panicked")
			err = fmt.Errorf("panic: %v", p) // redacted by conclude
		}
	}()
	return h(ctx, job)
}

// traceID is the span's trace id for logs, "" when tracing is off.
func traceID(span trace.Span) string {
	if sc := span.SpanContext(); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return ""
}
