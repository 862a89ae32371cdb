package jobstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Every confirmed job is in the expiry index, <prefix>:{expiry} (its own slot; member the job id,
// score when to check it, unix ms): at its start_by, or when its record may have only
// ExpiryMargin left of its retention. The sweep (engine's Stack.ExpireDue) checks the jobs that
// are due with scripts/expire.lua: a waiting one past its start_by, or with no more than the margin
// left, ends expired; one that ended leaves the index; any other is put back for later. So no job
// waits past its deadline unseen, and none vanishes when its record's TTL runs out while it waits.
// Every entry is due within a retention of its write, and each write sets the index's TTL to the
// retention: the index holds at most a retention's worth of jobs and dies when none is written.

// ExpiryKey is the key of the expiry index.
func (s *Store) ExpiryKey() string { return s.locks.Tag("expiry") }

// ExpiryMargin is how long before its record would run out a waiting job is expired (reason
// retention): half the retention, at most an hour.
func (s *Store) ExpiryMargin() time.Duration { return min(s.cfg.Retention/2, time.Hour) }

// ExpiryDue is when a job created now with deadline startBy (zero none) is first checked.
func (s *Store) ExpiryDue(now, startBy time.Time) time.Time {
	due := now.Add(s.cfg.Retention - s.ExpiryMargin())
	if !startBy.IsZero() && startBy.Before(due) {
		due = startBy.Add(time.Millisecond) // past it, not at it
	}
	return due
}

// QueueExpiry adds job id to the expiry index in pipe, to be checked at due (within a retention).
func (s *Store) QueueExpiry(ctx context.Context, pipe redis.Pipeliner, id string, due time.Time) {
	pipe.ZAdd(ctx, s.ExpiryKey(), redis.Z{Score: float64(due.UnixMilli()), Member: id})
	pipe.PExpire(ctx, s.ExpiryKey(), s.cfg.Retention)
}

// QueueExpiryMany adds jobs to the expiry index in pipe, each at its due (dues[i] for ids[i]), in
// one ZADD.
func (s *Store) QueueExpiryMany(ctx context.Context, pipe redis.Pipeliner, ids []string, dues []time.Time) {
	if len(ids) == 0 {
		return
	}
	members := make([]redis.Z, len(ids))
	for i, id := range ids {
		members[i] = redis.Z{Score: float64(dues[i].UnixMilli()), Member: id}
	}
	pipe.ZAdd(ctx, s.ExpiryKey(), members...)
	pipe.PExpire(ctx, s.ExpiryKey(), s.cfg.Retention)
}

// DueForExpiry lists up to limit jobs of the expiry index due by now, the most overdue first.
func (s *Store) DueForExpiry(ctx context.Context, now time.Time, limit int) ([]string, error) {
	ids, err := s.rdb.ZRangeByScore(ctx, s.ExpiryKey(), &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatInt(now.UnixMilli(), 10), Count: int64(limit),
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: read the expiry index: %w", err)
	}
	return ids, nil
}

// Unindex removes jobs from the expiry index (they ended, or their records are gone), in one
// command.
func (s *Store) Unindex(ctx context.Context, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	members := make([]any, len(ids))
	for i, id := range ids {
		members[i] = id
	}
	if err := s.rdb.ZRem(ctx, s.ExpiryKey(), members...).Err(); err != nil {
		return fmt.Errorf("jobstore: expiry index: %w", err)
	}
	return nil
}

// Reindex puts job id back into the expiry index, to be checked at due (within a retention).
func (s *Store) Reindex(ctx context.Context, id string, due time.Time) error {
	pipe := s.rdb.Pipeline()
	s.QueueExpiry(ctx, pipe, id, due)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("jobstore: expiry index: %w", err)
	}
	return nil
}

// ExpireState is what the expire script found.
type ExpireState string

// The expire states.
const (
	// ExpiredNow: the job is expired now (Reason; it was From, its delivery Delivery in Queue).
	ExpiredNow ExpireState = "expired"
	// ExpireGone: no record.
	ExpireGone ExpireState = "gone"
	// ExpireEnded: the job had ended.
	ExpireEnded ExpireState = "ended"
	// ExpireLater: it runs, or waits with time left: look again after Later.
	ExpireLater ExpireState = "later"
)

// Expiry is the expire script's answer.
type Expiry struct {
	State ExpireState
	// Reason is ExpiredStartBy or ExpiredRetention.
	Reason          string
	From            Status
	Delivery, Queue string
	Later           time.Duration
}

// Expire checks one job of the expiry index (scripts/expire.lua): a waiting job past its start_by,
// or whose record has no more than ExpiryMargin left, is expired, its dedup marker released (k must
// carry it: WithMarker). One round trip.
func (s *Store) Expire(ctx context.Context, k Keys, now time.Time) (Expiry, error) {
	state, rest, err := s.runList(ctx, expireScript, "expire", []string{k.Record, k.Timeline, k.Marker},
		now.UnixMilli(), ms(s.cfg.Retention), s.cfg.TimelineCap, s.cfg.WorkerID, ms(s.ExpiryMargin()))
	if err != nil {
		return Expiry{}, err
	}
	e := Expiry{State: ExpireState(state)}
	switch e.State {
	case ExpireGone, ExpireEnded:
		return e, nil
	case ExpireLater:
		later, err := intAt("expire", rest, 0)
		e.Later = time.Duration(later) * time.Millisecond
		return e, err
	case ExpiredNow:
		var from string
		for i, p := range []*string{&e.Reason, &from, &e.Delivery, &e.Queue} {
			if *p, err = stringAt("expire", rest, i); err != nil {
				return Expiry{}, err
			}
		}
		e.From = Status(from)
		return e, nil
	}
	return Expiry{}, replyError("expire", append([]any{state}, rest...))
}
