package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// The dispatcher of the admission layer is distributed: whoever changes it admits what it allows
// in the same script (an enqueue's wait, an ending job's done) and delivers what was admitted; the
// sweep (SweepFair, every worker's Run) is the backstop for a process that died in between. Each
// admission is one atomic script per type, so no fence is needed: a job is admitted once, and its
// delivery carries its first delivery's id, which asynq refuses twice.

// ErrNotBlocked: SkipBlocked was asked to skip a job that does not block its sequence.
var ErrNotBlocked = errors.New("engine: job does not block its sequence")

// fairWaitTimeout bounds the admission writes made after the caller's request was answered.
const fairWaitTimeout = 5 * time.Second

// fairWait puts a new job of tc in its key's list (before its confirmation: a job abandoned after
// it is gone when admitted, and freed then). It returns what the wait admitted, to release after
// the confirmation (whose timeline event says the job waits).
func (s *Stack) fairWait(ctx context.Context, tc TaskConfig, id string, spec Spec) ([]jobstore.FairEntry, error) {
	key := tc.Fair.keyOf(spec)
	var due time.Time
	if d := firstDelay(spec); d > 0 {
		due = s.now().Add(d)
	}
	data := encodeFairDelivery(limitHeaders(tc, spec), due)
	entries, err := s.store.FairWait(ctx, tc.Type, key, id, data, tc.Fair.weightOf(key), s.fairPolicy(tc))
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	return entries, nil
}

// releaseAdmitted makes each admitted job queued and delivers it. An entry whose job ended while
// it waited (cancelled, expired) or is gone (abandoned) frees its admission at once, which may
// admit more. A failure leaves the entry admitted for the sweep.
func (s *Stack) releaseAdmitted(ctx context.Context, client *asynq.Client, tc TaskConfig, entries []jobstore.FairEntry) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fairWaitTimeout)
	defer cancel()
	for len(entries) > 0 {
		e := entries[0]
		entries = entries[1:]
		r, err := s.store.FairRelease(ctx, e.JobID, e.Key, s.now())
		if err != nil {
			s.log.Warn().Err(err).Str("job_id", e.JobID).Str("event", "fair_release_failed").Msg("admitted job not released; the sweep tries again")
			continue
		}
		switch {
		case r.Released || r.Status == jobstore.StatusQueued:
			s.m.fairAdmitted.WithLabelValues(tc.Type).Inc()
			d := decodeFairDelivery(e.Data)
			delay := time.Duration(0)
			if d.Due > 0 {
				delay = max(time.UnixMilli(d.Due).Sub(s.now()), 0)
			}
			err := s.deliver(ctx, client, tc, e.JobID, r.Delivery, r.OpKey, r.Dedup, d.Headers, delay)
			if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
				// The record is queued without a delivery: the reconciler delivers it after its grace.
				s.log.Warn().Err(err).Str("job_id", e.JobID).Str("event", "fair_deliver_failed").Msg("admitted job not delivered")
			}
		case r.Status == "" || r.Status.Terminal():
			more, err := s.fairFree(ctx, tc, e.JobID)
			if err != nil {
				s.log.Warn().Err(err).Str("job_id", e.JobID).Msg("admission of an ended job not freed; the sweep tries again")
			}
			entries = append(entries, more...)
		}
	}
}

// fairFree frees job id's admission and returns what the freed capacity admitted.
func (s *Stack) fairFree(ctx context.Context, tc TaskConfig, id string) ([]jobstore.FairEntry, error) {
	_, entries, err := s.store.FairDone(ctx, tc.Type, id, s.fairPolicy(tc))
	return entries, err
}

// fairEnded is told that job id of tc ended with status (or will never run: its record is gone):
// its admission is freed and the next jobs admitted and delivered, unless a sequence that blocks
// on failure keeps its key for an operator.
func (s *Stack) fairEnded(ctx context.Context, tc TaskConfig, id string, status jobstore.Status) {
	if tc.Fair == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fairWaitTimeout)
	defer cancel()
	if s.blocksSequence(tc, status) {
		if keys, err := s.store.Keys(id, ""); err == nil {
			s.event(ctx, keys, Event{Event: "sequence_blocked", Detail: "its key's next jobs wait until an operator skips this job"})
		}
		return
	}
	entries, err := s.fairFree(ctx, tc, id)
	if err != nil {
		s.log.Warn().Err(err).Str("job_id", id).Msg("admission not freed; the sweep frees it")
		return
	}
	s.releaseAdmitted(ctx, s.wfClient, tc, entries)
}

func (s *Stack) blocksSequence(tc TaskConfig, status jobstore.Status) bool {
	return tc.Fair != nil && tc.Fair.Sequence && tc.Fair.BlockOnFailure && status == jobstore.StatusFailed
}

// SkipBlocked is the operator's action on a sequence blocked by job id, which failed for good:
// the job stays failed and its key's next job is admitted. ErrNotBlocked when the job is not
// failed or holds no admission.
func (s *Stack) SkipBlocked(ctx context.Context, id string) error {
	keys, err := s.store.Keys(id, "")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrJobNotFound, err)
	}
	v, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	tc, ok := s.TaskConfig(v.Raw[jobstore.FieldType])
	if !ok || tc.Fair == nil || jobstore.Status(v.Raw[jobstore.FieldStatus]) != jobstore.StatusFailed {
		return fmt.Errorf("%w: %s", ErrNotBlocked, id)
	}
	freed, entries, err := s.store.FairDone(ctx, tc.Type, id, s.fairPolicy(tc))
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	if !freed {
		return fmt.Errorf("%w: %s", ErrNotBlocked, id)
	}
	s.event(ctx, keys, Event{Event: "sequence_skipped", Detail: "an operator let its key's next job run"})
	s.releaseAdmitted(ctx, s.wfClient, tc, entries)
	return nil
}

// SweepFair is the admission layer's backstop, for each fairly dispatched type: an admitted job
// still waiting (its dispatcher died before releasing it) is released, an admitted job that ended
// or is gone without freeing its admission (its process died, it was cancelled or expired) is
// freed, and what the capacity allows is admitted. It returns how many admissions it repaired.
// Run calls it in every worker process, every RescueInterval.
func (s *Stack) SweepFair(ctx context.Context) (int, error) {
	repaired := 0
	for _, tc := range s.fairTypes() {
		admitted, err := s.store.FairAdmittedJobs(ctx, tc.Type)
		if err != nil {
			return repaired, fmt.Errorf("engine: %w", err)
		}
		ids := make([]string, 0, len(admitted))
		for id := range admitted {
			ids = append(ids, id)
		}
		statuses, err := s.store.FairStatuses(ctx, ids)
		if err != nil {
			return repaired, fmt.Errorf("engine: %w", err)
		}
		var release []jobstore.FairEntry
		for i, id := range ids {
			st := statuses[i]
			switch {
			case st == jobstore.StatusWaiting:
				release = append(release, jobstore.FairEntry{JobID: id, Key: admitted[id]})
			case (st == "" || st.Terminal()) && !s.blocksSequence(tc, st):
				more, err := s.fairFree(ctx, tc, id)
				if err != nil {
					return repaired, fmt.Errorf("engine: %w", err)
				}
				release = append(release, more...)
			default:
				continue
			}
			repaired++
		}
		more, err := s.store.FairPump(ctx, tc.Type, s.fairPolicy(tc))
		if err != nil {
			return repaired, fmt.Errorf("engine: %w", err)
		}
		s.releaseAdmitted(ctx, s.wfClient, tc, append(release, more...))
	}
	return repaired, nil
}

// fairTypes are the registered types dispatched fairly.
func (s *Stack) fairTypes() []TaskConfig {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []TaskConfig
	for _, r := range s.types {
		if r.cfg.Fair != nil {
			out = append(out, r.cfg)
		}
	}
	return out
}

// FairCounts is a fairly dispatched type's admission counts and its top keys (at most top by
// backlog and top by running jobs), for the API and metrics.
func (s *Stack) FairCounts(ctx context.Context, typ string, top int) (jobstore.FairTop, error) {
	tc, ok := s.TaskConfig(typ)
	if !ok || tc.Fair == nil {
		return jobstore.FairTop{}, fmt.Errorf("%w: %q is not dispatched fairly", ErrUnknownType, typ)
	}
	c, err := s.store.FairCounts(ctx, typ, top)
	if err != nil {
		return c, fmt.Errorf("engine: %w", err)
	}
	return c, nil
}
