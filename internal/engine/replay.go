package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// Replay errors.
var (
	// ErrNotFailed: only a failed job can be replayed.
	ErrNotFailed = errors.New("engine: job is not failed")
	// ErrUnrunnable: what the job needs to run again is gone.
	ErrUnrunnable = errors.New("engine: job cannot run again")
)

// replayDelay is how long a replay's delivery waits before it may start: the record must take it
// first (see Replay).
const replayDelay = 3 * time.Second

// Replay gives a failed job a new delivery with its attempts reset. The delivery is enqueued
// first, delayed by replayDelay, and the record takes it afterwards, no later than the request's
// deadline and the delivery's start: a replay that fails at any step leaves the job failed as it
// was, and a delivery it enqueued finds the job failed and is acknowledged without running. It does
// not depend on asynq's archive (which asynq trims), only on the job record.
//
// waits is true when the replay waits for its key's turn (a fairly dispatched type's job that holds
// no admission). It is the answer of the moment the record took the replay: the dispatcher may
// have admitted the job by the time the caller reads the record.
func (s *Stack) Replay(ctx context.Context, client *asynq.Client, id string) (waits bool, err error) {
	keys, err := s.store.Keys(id, "")
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrJobNotFound, err)
	}
	info, err := s.store.ReplayInfo(ctx, keys)
	if errors.Is(err, jobstore.ErrNotFound) {
		return false, fmt.Errorf("%w: %s", ErrJobNotFound, id)
	}
	if err != nil {
		return false, fmt.Errorf("engine: replay %s: %w", id, err)
	}
	if info.Status != jobstore.StatusFailed {
		return false, fmt.Errorf("%w: it is %s", ErrNotFailed, info.Status)
	}
	tc, ok := s.TaskConfig(info.Type)
	if !ok {
		return false, fmt.Errorf("%w: type %q is no longer registered", ErrUnrunnable, info.Type)
	}
	n := info.Deliveries
	// The job's limit key, as its first delivery carried it (Limit.Key sees what the record keeps,
	// decrypted).
	payload, err := s.openValue(id, jobstore.FieldPayload, info.Payload)
	if err != nil {
		return false, err
	}
	spec := Spec{Type: info.Type, Tenant: info.Tenant, Resource: info.Resource, Payload: payload, OpKey: info.OpKey}
	headers := limitHeaders(tc, spec)
	if tc.Fair != nil {
		// A job that still holds its admission (it blocks its sequence) runs in its place, below;
		// any other waits for its key's turn.
		sh, holds, err := s.fairShardHolding(ctx, tc, tc.Fair.keyOf(spec), id)
		if err != nil {
			return false, fmt.Errorf("engine: replay %s: %w", id, err)
		}
		if !holds {
			return true, s.replayFair(ctx, tc, keys, id, info, spec, headers)
		}
		// It takes its place of the capacity back (a blocked job gave it to the other keys): if
		// another key took it meanwhile, the type runs one over its capacity until either ends.
		if err := s.store.FairUnblock(ctx, sh, id); err != nil {
			return false, fmt.Errorf("engine: replay %s: %w", id, err)
		}
		if sh.Of > 1 || s.fairShards(tc) > 1 {
			// Its end frees the admission where it is held, maybe in a layout before the current.
			headers = withHeader(headers, HeaderFairShard, fairShardHeader(sh))
		}
	}
	for try := 0; try < 3; try++ {
		n++
		// The delivery may start once replayDelay has passed: the record must take it before then.
		// asynq keeps a delay in whole seconds, so the delivery may start a second early; a start
		// before the record took it bounces (untaken) anyway. Against Redis's TIME: the real clock.
		by := s.store.RedisTime(time.Now().Add(replayDelay - time.Second - jobstore.DeadlineMargin))
		if d := s.store.WriteDeadline(ctx); d != 0 {
			by = min(by, d)
		}
		delivery := DeliveryID(id, n)
		err = s.deliverTo(ctx, client, tc, s.recordQueue(tc.Queue, id, info.Queue), id, delivery, info.OpKey, info.Dedup, headers, replayDelay)
		if errors.Is(err, asynq.ErrTaskIDConflict) {
			// Another replay's delivery (one under way, or one whose take was refused and not yet
			// removed): when the job is no longer failed another replay or a cancel won; else go
			// on after the highest number the record has taken.
			now, rerr := s.store.ReplayInfo(ctx, keys)
			if rerr == nil && now.Status != jobstore.StatusFailed {
				return false, fmt.Errorf("%w: it is %s", ErrNotFailed, now.Status)
			}
			if rerr == nil {
				n = max(n, now.Deliveries)
			}
			continue
		}
		if err != nil {
			return false, err
		}
		refused, err := s.takeReplay(ctx, keys, id, n, by, false)
		if refused {
			// The record will never take it: removed, so that it is not left waiting in asynq
			// (it would be acknowledged without running). Best effort, as a cancel's.
			_ = asynq.NewInspectorFromRedisClient(s.rdb).DeleteTask(s.recordQueue(tc.Queue, id, info.Queue), delivery)
		}
		return false, err
	}
	// Every number tried was another replay's: they race on this job, and one of them wins.
	return false, fmt.Errorf("%w: other replays of %s are under way", ErrNotFailed, id)
}

// takeReplay makes the job take its replay's delivery n, if it is still failed and in time.
// refused is true when Redis answered and the record did not take it.
// waiting: the job takes status waiting (a fairly dispatched type's replay, which waits for its key).
func (s *Stack) takeReplay(ctx context.Context, keys jobstore.Keys, id string, n int, by int64, waiting bool) (refused bool, err error) {
	state, status, err := s.store.TakeReplay(ctx, keys, n, by, s.now(), waiting)
	if err != nil {
		return false, fmt.Errorf("engine: replay %s: %w", id, err) // it may have been taken
	}
	switch state {
	case jobstore.Replayed:
		s.Stats.Replayed.Add(1)
		// Waiting again: back in the expiry index (best effort), so it cannot vanish unseen.
		_ = s.store.Reindex(ctx, id, s.store.ExpiryDue(s.now(), time.Time{}))
		return false, nil
	case jobstore.ReplayGone:
		return true, fmt.Errorf("%w: %s", ErrJobNotFound, id)
	case jobstore.ReplayConflict:
		return true, fmt.Errorf("%w: it is %s", ErrNotFailed, status)
	case jobstore.Unrunnable:
		return true, fmt.Errorf("%w: its payload is gone", ErrUnrunnable)
	case jobstore.Moved:
		return true, fmt.Errorf("%w: another replay took it", ErrNotFailed)
	}
	return true, fmt.Errorf("%w: replay of %s reached Redis too late", ErrNotAccepted, id)
}

// replayFair is Replay for a fairly dispatched type's job that holds no admission: its replay
// waits for its key's turn at the end of its key's list. The wait first (once: a replay raced by
// another waits once), with the delivery's number and a due time replayDelay ahead, then the
// record takes delivery n and becomes waiting, no later than that due time. A replay refused at
// the take leaves an entry whose delivery, once admitted, finds the job as it was: acknowledged
// without running, its admission freed (at its start, or by the sweep; under BlockOnFailure the
// sweep takes the failed job for a blocking one, and an operator's SkipBlocked frees it).
func (s *Stack) replayFair(ctx context.Context, tc TaskConfig, keys jobstore.Keys, id string, info jobstore.ReplayInfo, spec Spec, headers map[string]string) error {
	n := info.Deliveries + 1
	by := s.store.RedisTime(time.Now().Add(replayDelay - time.Second - jobstore.DeadlineMargin))
	if d := s.store.WriteDeadline(ctx); d != 0 {
		by = min(by, d)
	}
	d := fairDelivery{OpKey: info.OpKey, Dedup: info.Dedup, Headers: headers, Due: s.now().Add(replayDelay).UnixMilli(), N: n}
	admitted, err := s.waitDelivery(ctx, tc, tc.Fair.keyOf(spec), id, d, true)
	if err != nil {
		return err
	}
	defer s.deliverAdmittedAtOnce(ctx, tc, admitted) // others' too: delivered whatever the take finds
	_, err = s.takeReplay(ctx, keys, id, n, by, true)
	return err
}
