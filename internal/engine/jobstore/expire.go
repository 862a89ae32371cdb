package jobstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Every confirmed job is in the expiry index, <prefix>:{expiry} (its own slot, or on a cluster its
// stripe's, <prefix>:{expiry~<k>}: stripes.go; member the job id,
// score when to check it, unix ms): at its start_by, or when its record may have only
// ExpiryMargin left of its retention. The sweep (engine's Stack.ExpireDue) checks the jobs that
// are due with scripts/expire.lua: a waiting one past its start_by, or with no more than the margin
// left, ends expired; one that ended leaves the index; any other is put back for later. So no job
// waits past its deadline unseen, and none vanishes when its record's TTL runs out while it waits.
// Every entry is due within a retention of its write, and each write sets the index's TTL to the
// retention: the index holds at most a retention's worth of jobs and dies when none is written.

// ExpiryKey is the key of the unstriped expiry index (stripes.go): the only one on one Redis.
func (s *Store) ExpiryKey() string { return s.locks.Tag("expiry") }

// ExpiryKeyOf is the key of the expiry index's stripe that holds job id.
func (s *Store) ExpiryKeyOf(id string) string {
	return s.locks.Tag(s.stripeTag("expiry", s.stripeOfID(id)))
}

// ExpiryKeys are the expiry index's keys a sweep reads: the unstriped one, then every stripe's.
func (s *Store) ExpiryKeys() []string {
	tags := s.stripeTags("expiry")
	keys := make([]string, len(tags))
	for i, t := range tags {
		keys[i] = s.locks.Tag(t)
	}
	return keys
}

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
	key := s.ExpiryKeyOf(id)
	pipe.ZAdd(ctx, key, redis.Z{Score: float64(due.UnixMilli()), Member: id})
	pipe.PExpire(ctx, key, s.cfg.Retention)
}

// QueueExpiryMany adds jobs to the expiry index in pipe, each at its due (dues[i] for ids[i]), in
// one ZADD per stripe.
func (s *Store) QueueExpiryMany(ctx context.Context, pipe redis.Pipeliner, ids []string, dues []time.Time) {
	byKey := map[string][]redis.Z{}
	var order []string
	for i, id := range ids {
		key := s.ExpiryKeyOf(id)
		if byKey[key] == nil {
			order = append(order, key)
		}
		byKey[key] = append(byKey[key], redis.Z{Score: float64(dues[i].UnixMilli()), Member: id})
	}
	for _, key := range order {
		pipe.ZAdd(ctx, key, byKey[key]...)
		pipe.PExpire(ctx, key, s.cfg.Retention)
	}
}

// DueForExpiry lists up to limit jobs of the expiry index due by now, the most overdue first: up
// to limit of each stripe, read in one pipeline, merged.
func (s *Store) DueForExpiry(ctx context.Context, now time.Time, limit int) ([]string, error) {
	keys := s.ExpiryKeys()
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.ZSliceCmd, len(keys))
	for i, key := range keys {
		cmds[i] = pipe.ZRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{
			Min: "-inf", Max: strconv.FormatInt(now.UnixMilli(), 10), Count: int64(limit),
		})
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("jobstore: read the expiry index: %w", err)
	}
	var due []redis.Z
	seen := map[string]bool{}
	for _, c := range cmds {
		for _, z := range c.Val() {
			if id, _ := z.Member.(string); !seen[id] {
				seen[id] = true
				due = append(due, z)
			}
		}
	}
	slices.SortStableFunc(due, func(a, b redis.Z) int { return cmp.Compare(a.Score, b.Score) })
	ids := make([]string, 0, min(limit, len(due)))
	for _, z := range due[:min(limit, len(due))] {
		ids = append(ids, z.Member.(string))
	}
	return ids, nil
}

// Unindex removes jobs from the expiry index (they ended, or their records are gone): one ZREM
// per stripe, and one of the unstriped key when the index is striped, in one pipeline.
func (s *Store) Unindex(ctx context.Context, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	byKey := map[string][]any{}
	var order []string
	add := func(key, id string) {
		if byKey[key] == nil {
			order = append(order, key)
		}
		byKey[key] = append(byKey[key], id)
	}
	for _, id := range ids {
		add(s.ExpiryKeyOf(id), id)
		if s.stripes > 1 {
			add(s.ExpiryKey(), id) // an entry from before the striping
		}
	}
	pipe := s.rdb.Pipeline()
	for _, key := range order {
		pipe.ZRem(ctx, key, byKey[key]...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("jobstore: expiry index: %w", err)
	}
	return nil
}

// Reindex puts job id back into the expiry index, to be checked at due (within a retention).
func (s *Store) Reindex(ctx context.Context, id string, due time.Time) error {
	pipe := s.rdb.Pipeline()
	s.QueueExpiry(ctx, pipe, id, due)
	if s.stripes > 1 {
		pipe.ZRem(ctx, s.ExpiryKey(), id) // an entry from before the striping moves to its stripe
	}
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
