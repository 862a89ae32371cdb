package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// The deadline sweep. A job's start_by is decided in its start script when its delivery comes; the
// sweep finds the jobs whose delivery does not come in time (scheduled past the deadline, deleted
// from asynq, stuck behind a backlog) and the jobs that wait so long that their record would run
// out of its retention, and expires them visibly (jobstore's expiry index, scripts/expire.lua).
// It runs with every rescue pass (Rescuer.Pass), on every worker: the script decides on the record,
// so sweepers that race expire a job once.

// expireBatch is how many due jobs one read of the index returns; expireRounds bounds the reads
// of one pass, so a pass stays short when very many jobs fall due at once.
const (
	expireBatch  = 100
	expireRounds = 10
)

// ExpireDue checks every job of the expiry index that is due by now (at most expireRounds ×
// expireBatch a pass) and returns how many it expired. A waiting job (queued, scheduled or
// retrying) past its start_by, or whose record has no more than the store's ExpiryMargin left,
// ends expired: event expired, dedup marker released, its pending delivery deleted from asynq
// where asynq allows (one left behind is refused at start). A job that runs, or waits with time
// left, is checked again later; one that ended leaves the index.
func (s *Stack) ExpireDue(ctx context.Context) (int, error) {
	if err := s.unindexEnded(ctx); err != nil {
		return 0, fmt.Errorf("engine: expire: %w", err)
	}
	now := s.now()
	expired := 0
	for range expireRounds {
		ids, err := s.store.DueForExpiry(ctx, now, expireBatch)
		if err != nil {
			return expired, fmt.Errorf("engine: expire: %w", err)
		}
		for _, id := range ids {
			done, err := s.expireOne(ctx, id, now)
			if err != nil {
				return expired, fmt.Errorf("engine: expire %s: %w", id, err)
			}
			if done {
				expired++
			}
		}
		if len(ids) < expireBatch {
			break
		}
	}
	return expired, nil
}

// expireOne checks one due job; true when it expired it.
func (s *Stack) expireOne(ctx context.Context, id string, now time.Time) (bool, error) {
	keys, err := s.store.Keys(id, "")
	if err != nil {
		return false, s.store.Unindex(ctx, id) // not a job id: nothing to check
	}
	info, err := s.store.CancelInfo(ctx, keys) // its dedup marker, queue and type
	if errors.Is(err, jobstore.ErrNotFound) {
		return false, s.store.Unindex(ctx, id)
	}
	if err != nil {
		return false, err
	}
	if keys, err = s.keysFor(id, "", info.Dedup); err != nil {
		return false, s.store.Unindex(ctx, id)
	}
	res, err := s.store.Expire(ctx, keys, now)
	if err != nil {
		return false, err
	}
	switch res.State {
	case jobstore.ExpireLater:
		return false, s.store.Reindex(ctx, id, now.Add(res.Later))
	case jobstore.ExpiredNow:
	default:
		return false, s.store.Unindex(ctx, id)
	}
	s.countExpired(info.Type, res.Reason)
	if tc, ok := s.TaskConfig(info.Type); ok {
		s.fairWithdraw(ctx, tc, id, res.From, info)
	}
	s.endedIn(id, info.Workflow)
	deleted := false
	if res.Delivery != "" {
		// Best effort, as a cancel's: the record is the truth, a delivery left behind is refused.
		deleted = asynq.NewInspectorFromRedisClient(s.rdb).DeleteTask(res.Queue, res.Delivery) == nil
	}
	s.log.Info().Str("job_id", id).Str("event", "expired").Str("reason", res.Reason).Str("from", string(res.From)).
		Str("worker_id", s.cfg.WorkerID).Bool("delivery_deleted", deleted).Msg("job expired before it started")
	return true, s.store.Unindex(ctx, id)
}

// countExpired counts a job of type typ that ended expired for reason.
func (s *Stack) countExpired(typ, reason string) {
	s.m.transitions.WithLabelValues(typ, "expired").Inc()
	if reason == jobstore.ExpiredRetention {
		s.m.expired.WithLabelValues(typ, "retention").Inc()
		return
	}
	s.m.expired.WithLabelValues(typ, "start_by").Inc()
}
