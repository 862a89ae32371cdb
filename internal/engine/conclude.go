package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/freetext"
	"github.com/jobguard/jobguard/internal/redact"
	"github.com/jobguard/jobguard/locking"
)

// finishTimeout bounds the finish script, on a context that survives the delivery's (shutdown,
// timeout).
const finishTimeout = 5 * time.Second

// conclude decides the job's outcome from the handler's error, writes it, and tells asynq.
func (s *Stack) conclude(ctx, hctx context.Context, job *Job, herr error, log zerolog.Logger) error {
	tc := job.tc
	if errors.Is(context.Cause(hctx), ErrCancelled) {
		return s.cancelledRun(ctx, job, herr, log)
	}
	if cause := context.Cause(hctx); errors.Is(cause, locking.ErrLeaseLost) {
		return s.leaseLost(ctx, job, cause, log)
	}
	if cause := context.Cause(hctx); errors.Is(cause, ErrSlotLost) {
		// The job's lease still holds: requeue it (attempt given back); it takes a slot again.
		msg := cause.Error()
		_ = s.finish(ctx, job, jobstore.Outcome{Status: jobstore.StatusQueued, Event: "slot_lost", Detail: msg, Error: msg, Refund: true}, log)
		log.Warn().Str("event", "slot_lost").Err(cause).Msg("limit slot lost; handler stopped, job requeued")
		return s.bounce(tc.Type, "slot_lost", 0, cause)
	}
	if herr == nil {
		s.Stats.Succeeded.Add(1)
		if err := s.finish(ctx, job, jobstore.Outcome{Status: jobstore.StatusDone}, log); err != nil {
			return err
		}
		log.Info().Str("event", "done").Msg("job done")
		return nil
	}
	if ctx.Err() != nil && s.stopping.Load() {
		s.Stats.Requeued.Add(1)
		_ = s.finish(ctx, job, jobstore.Outcome{Status: jobstore.StatusQueued, Event: "requeued", Detail: "shutdown", Error: "shutdown", Refund: true}, log)
		log.Info().Str("event", "requeued").Msg("shutdown: job requeued")
		return s.bounce(tc.Type, "shutdown", 0, context.Cause(ctx))
	}
	// A handler's error may quote a URL with credentials (net/http's *url.Error does): scrub it
	// before it reaches the record, the timeline, the log and asynq's stored error.
	herr = redact.Error(herr)
	class, retryAfter := classOf(herr)
	if class == classRateLimited && job.slot != nil {
		// The upstream's limit is the key's too: its next starts wait (in the finish's round trip).
		job.slot.pushBack = max(retryAfter, s.cfg.BounceDelay)
	}
	msg := herr.Error()
	switch class {
	case classRevoked:
		s.Stats.Revoked.Add(1)
		_ = s.finish(ctx, job, jobstore.Outcome{Status: jobstore.StatusRevoked, Detail: msg, Error: msg}, log)
		log.Info().Str("event", "revoked").Str("reason", msg).Msg("job revoked")
		return fmt.Errorf("%s: %w", msg, asynq.RevokeTask)
	case classPermanent:
		return s.deadLetter(ctx, job, msg, "permanent error: dead letter", log)
	case classRateLimited:
		if job.age() < tc.RateLimitMaxAge {
			_ = s.finish(ctx, job, jobstore.Outcome{Status: jobstore.StatusRetrying, Event: "rate_limited", Detail: msg, Error: msg, Refund: true}, log)
			log.Info().Str("event", "bounced").Str("reason", "rate_limited").Dur("retry_after", retryAfter).Msg("rate limited")
			return s.bounce(tc.Type, "rate_limited", retryAfter, herr)
		}
	}
	if job.Attempt >= tc.MaxAttempts {
		return s.deadLetter(ctx, job, msg, "attempt budget spent: dead letter", log)
	}
	s.rngMu.Lock()
	delay := tc.Backoff.Delay(job.Attempt, s.rng)
	s.rngMu.Unlock()
	s.Stats.Retried.Add(1)
	s.m.retries.WithLabelValues(tc.Type, classNames[class]).Inc()
	_ = s.finish(ctx, job, jobstore.Outcome{Status: jobstore.StatusRetrying, Event: "retry_scheduled", Detail: msg, Error: msg}, log)
	log.Info().Str("event", "retry_scheduled").Str("error", msg).Dur("delay", delay).Msg("retry scheduled")
	return &delayed{delay: delay, err: herr}
}

// leaseLost ends a run whose lease was lost: nothing more is written under its token (the job is
// another delivery's now, or will be), but the timeline says why it stopped.
func (s *Stack) leaseLost(ctx context.Context, job *Job, cause error, log zerolog.Logger) error {
	s.Stats.LeaseLost.Add(1)
	s.m.lease.WithLabelValues(job.Type, "lost").Inc()
	f := job.lease.Fence()
	lost := Event{Event: "lease_lost", Delivery: job.Delivery, Token: f.Token, Attempt: job.Attempt, Detail: cause.Error()}
	if errors.Is(cause, locking.ErrRenewFailed) {
		s.m.lease.WithLabelValues(job.Type, "renew_failed").Inc()
		log.Warn().Str("event", "lease_renew_failed").Err(cause).Msg("lease renewal failed")
		failed := lost
		failed.Event = "lease_renew_failed"
		s.event(ctx, job.keys, failed, lost)
	} else {
		s.event(ctx, job.keys, lost)
	}
	log.Warn().Str("event", "lease_lost").Err(cause).Msg("lease lost; handler stopped")
	return s.bounce(job.Type, "lease_lost", 0, cause)
}

// deadLetter fails the job for good: asynq archives the delivery (the dead letter).
func (s *Stack) deadLetter(ctx context.Context, job *Job, msg, why string, log zerolog.Logger) error {
	s.Stats.Failed.Add(1)
	s.m.deadLettered.WithLabelValues(job.Type).Inc()
	_ = s.finish(ctx, job, jobstore.Outcome{Status: jobstore.StatusFailed, Detail: msg, Error: msg}, log)
	log.Warn().Str("event", "failed").Str("error", msg).Msg(why)
	return fmt.Errorf("%s: %w", msg, asynq.SkipRetry)
}

// finish writes the outcome with the job's fence, in one round trip.
func (s *Stack) finish(ctx context.Context, job *Job, o jobstore.Outcome, log zerolog.Logger) (err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	ctx, span := scriptSpan(ctx, "jobguard.finish")
	defer func() { endSpan(span, err) }()
	result, serr := s.sealValue(job.tc, job.ID, jobstore.FieldResult, []byte(job.result))
	if serr != nil {
		return s.bounce(job.Type, "finish_failed", 0, serr)
	}
	o.Result = string(result)
	// A handler's error text may carry a tenant's input: stored escaped, as results are.
	o.Error, o.Detail = freetext.Escape(o.Error), freetext.Escape(o.Detail)
	f := job.lease.Fence()
	fairDone := s.fairDoneWithFinish(job, o.Status)
	res, err := s.store.Finish(ctx, job.keys, jobstore.FinishArgs{
		Delivery: job.Delivery, Token: f.Token, Owner: f.Owner, Now: s.now(), HasOpKey: job.OpKey != "",
		AppliedTTL: job.tc.AppliedTTL, ClearOnEnd: job.keys.Clear == "done", Outcome: o, Release: s.finishRelease(job.slot),
		FairDone: fairDone, JobID: job.ID,
	})
	fairFreed := s.fairFinished(ctx, job, fairDone, res.FairDone)
	if job.slot != nil && (err == nil || isNotDurable(err)) && res.Released == nil {
		job.slot.released = true // else the delivery's own release tries again
	}
	if isNotDurable(err) {
		// Written on the master, maybe not on a replica: asynq keeps the delivery (see durable.go).
		s.countFinish(job, o, res)
		log.Warn().Str("event", "not_durable").Str("step", "finish").Str("status", string(o.Status)).Err(err).Msg("finish not acknowledged by the replicas; delivery kept")
		return s.bounce(job.Type, "not_durable", 0, err)
	}
	if err != nil {
		log.Error().Err(err).Str("status", string(o.Status)).Msg("finish script failed")
		return s.bounce(job.Type, "finish_failed", 0, fmt.Errorf("finish script: %w", err))
	}
	s.countFinish(job, o, res)
	switch res.State {
	case jobstore.Finished:
		if o.Status.Terminal() {
			s.endedIn(job.ID, job.Headers[HeaderWorkflow])
			if !fairFreed {
				awaitFairFlush(s.fairEnded(ctx, job.tc, job.ID, o.Status, job.Headers))
			}
		}
		if o.Status == jobstore.StatusDone || o.Status == jobstore.StatusRevoked {
			s.unindex.add(job.ID)
		}
	case jobstore.StaleWrite:
		s.Stats.StaleWrites.Add(1)
		s.m.staleWrites.WithLabelValues(job.Type).Inc()
		log.Warn().Str("event", "stale_write_rejected").Int64("current_token", res.Current).Msg("a newer token owns the job")
		// The refusal is on the timeline, maybe of a job that ended (cancelled under its run):
		// its copy, taken at the end, is taken again.
		s.ended(job.ID)
		s.cancelledRunReturned(ctx, job)
	case jobstore.Invalid:
		s.Stats.InvalidTransitions.Add(1)
		s.m.invalid.WithLabelValues(job.Type).Inc()
		log.Warn().Str("event", "invalid_transition").Str("status", res.Status).Str("to", string(o.Status)).Msg("transition rejected")
		s.ended(job.ID)
	}
	return nil
}

// cancelledRunReturned frees the fair admission of a job cancelled under this run, once its
// handler has returned (its finish refused as stale), whether or not the run saw the cancel: a
// sequence's next job need not wait for the sweep's grace. A stale run of a job cancelled under
// another run (a rescue's) frees nothing: that run may still be returning.
func (s *Stack) cancelledRunReturned(ctx context.Context, job *Job) {
	if job.tc.Fair == nil {
		return
	}
	if mine, err := s.store.CancelledUnder(ctx, job.keys, job.lease.Fence().Owner); err == nil && mine {
		awaitFairFlush(s.fairEnded(ctx, job.tc, job.ID, jobstore.StatusCancelled, job.Headers))
	}
}

// countFinish counts a finish that wrote its status (on the master at least).
func (s *Stack) countFinish(job *Job, o jobstore.Outcome, res jobstore.Finishing) {
	if res.State == jobstore.Finished {
		s.m.transitions.WithLabelValues(job.Type, string(o.Status)).Inc()
	}
}

// outcomeOf names what asynq was told, for the run duration histogram.
func outcomeOf(err error) string {
	var d *delayed
	switch {
	case err == nil:
		return "done"
	case errors.Is(err, ErrBounced):
		return "bounced"
	case errors.As(err, &d):
		return "retry"
	case errors.Is(err, asynq.RevokeTask):
		return "revoked"
	default:
		return "failed"
	}
}

// eventTimeout bounds a timeline append, best effort.
const eventTimeout = 2 * time.Second

// event appends timeline events without changing status (bounces, lost leases), stamped with this
// worker and the current time. Best effort: the timeline is forensics, never state.
func (s *Stack) event(ctx context.Context, k jobstore.Keys, events ...Event) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), eventTimeout)
	defer cancel()
	_ = s.store.AddEvents(wctx, k, s.now(), events...)
}
