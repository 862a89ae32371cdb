package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// The limiter for callers outside the stack's own runs (middleware's lease level, which keeps
// no job record): the same take, renewals, watch and release as a job's slot, the key chosen by
// the caller instead of carried in a delivery header.

// ErrOverLimit: a take found its key over a limit (every slot held, or the rate's next start
// not due); OverLimitError says which and how long.
var ErrOverLimit = errors.New("engine: over the key's limit")

// OverLimitError is TakeSlot's answer for a key over its limit. Reason is "limit_full" (every
// slot held; the earliest expires within Wait) or "limit_rate" (the rate's next start is due in
// Wait, or the key was pushed back).
type OverLimitError struct {
	Reason string
	Wait   time.Duration
	Detail string
}

func (e *OverLimitError) Error() string { return "engine: " + e.Detail }

// Is makes errors.Is(err, ErrOverLimit) hold.
func (e *OverLimitError) Is(target error) bool { return target == ErrOverLimit }

// Slot is a limit slot held by a caller of TakeSlot: renewed by the stack's limiter until
// Release, zombies included. A nil *Slot is no slot (nothing limited): its Watch changes
// nothing, its ValidFor is the largest Duration, its Token 0, its At zero, its Release nothing.
type Slot struct {
	s  *Stack
	sl *slot
}

// RegisterLimit makes type typ's limit series exist and checks lim as Register does (a limit
// Redis cannot keep panics), for a type limited through TakeSlot rather than registered.
func (s *Stack) RegisterLimit(typ string, lim Limit) {
	s.limits.register(TaskConfig{Type: typ, Limit: lim.withDefaults()})
}

// TakeSlot takes a slot of key's limit lim of task type typ for owner (a lease owner), held for
// ttl between renewals, in one round trip. A start the rate reserves within the stack's
// SlotWait is waited for here; a key over its limit answers an *OverLimitError (ErrOverLimit);
// any other error leaves it unknown whether a slot was taken (an untouched one lapses within
// ttl). The caller releases the slot with Release, and watches it with Watch while it runs.
func (s *Stack) TakeSlot(ctx context.Context, typ string, lim Limit, key, owner string, ttl time.Duration) (*Slot, error) {
	lim = lim.withDefaults()
	lk := s.store.LimitKeys(typ, key)
	args := jobstore.LimitArgs{Owner: owner, SlotTTL: ttl, Concurrency: lim.Concurrency,
		Interval: lim.interval(), Tolerance: lim.tolerance(), MaxWait: s.cfg.SlotWait}
	sent := time.Now()
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	tk, err := s.store.TakeLimit(wctx, lk, args)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("engine: limit take: %w", err)
	}
	if tk.State != jobstore.Taken {
		reason, detail := overLimit(lim, tk)
		s.limits.waits.WithLabelValues(typ, strings.TrimPrefix(reason, "limit_")).Inc()
		return nil, &OverLimitError{Reason: reason, Wait: tk.Wait, Detail: detail}
	}
	sl := &Slot{s: s, sl: &slot{typ: typ, owner: owner, keys: lk, ttl: ttl, tolerance: args.Tolerance, token: tk.Token, at: tk.At}}
	if lim.Concurrency > 0 {
		s.limits.hold(sl.sl, sent)
	}
	if tk.Wait <= 0 {
		return sl, nil
	}
	select {
	case <-time.After(tk.Wait):
		return sl, nil
	case <-ctx.Done():
		sl.Release(ctx)
		return nil, context.Cause(ctx)
	}
}

// Watch returns ctx cancelled with cause ErrSlotLost when the slot lapses (its renewals refused,
// or missing for 0.8 of its TTL); stop ends the watch. A rate-only slot never lapses.
func (sl *Slot) Watch(ctx context.Context) (context.Context, func()) {
	if sl == nil {
		return ctx, func() {}
	}
	return sl.s.limits.watch(ctx, sl.sl)
}

// ValidFor is how much longer the slot may be trusted (as Job.LimitValidFor): 0 once lapsed,
// the largest Duration for a rate-only slot.
func (sl *Slot) ValidFor() time.Duration {
	if sl == nil {
		return unbounded
	}
	return sl.s.limits.remaining(sl.sl)
}

// Token is the slot's fencing token (0 for no slot): tokens of one key rise with every slot
// taken.
func (sl *Slot) Token() int64 {
	if sl == nil {
		return 0
	}
	return sl.sl.token
}

// At is the start the take granted, in Redis's clock (zero for no slot).
func (sl *Slot) At() time.Time {
	if sl == nil {
		return time.Time{}
	}
	return sl.sl.at
}

// PushBack makes the key's next starts wait d after the release (an upstream's Retry-After);
// at least the stack's BounceDelay.
func (sl *Slot) PushBack(d time.Duration) { sl.sl.pushBack = max(d, sl.s.cfg.BounceDelay) }

// Release stops the slot's renewals and gives it back, on its own round trip (a context that
// outlives ctx's cancellation). Releasing twice, or a nil slot, does nothing.
func (sl *Slot) Release(ctx context.Context) {
	if sl != nil {
		sl.s.releaseLimit(ctx, sl.sl)
	}
}

// ReleaseLater is Release without waiting for the round trip: the release is queued now, after the
// calls this process queued before it (the run's finish), and then runs when it is answered.
// Releasing twice, or a nil slot, does nothing but run then.
func (sl *Slot) ReleaseLater(ctx context.Context, then func()) {
	if sl == nil || sl.sl.released {
		then()
		return
	}
	s := sl.s
	s.limits.drop(sl.sl)
	sl.sl.released = true
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	s.store.PostLimitRelease(wctx, sl.sl.release(), func(err error) {
		cancel()
		if err != nil {
			s.log.Warn().Err(err).Str("type", sl.sl.typ).Str("event", "limit_release_failed").Msg("limit slot not released; it lapses within its TTL")
		}
		then()
	})
}

// overLimit is the bounce reason and the words of a take that found its key over lim.
func overLimit(lim Limit, tk jobstore.Take) (reason, detail string) {
	if tk.State == jobstore.RateWait {
		if lim.Rate == 0 || tk.Wait > lim.Per {
			return "limit_rate", fmt.Sprintf("its key's starts are pushed back (an upstream's rate limit) or queued: next start in %s", tk.Wait.Round(time.Millisecond))
		}
		return "limit_rate", fmt.Sprintf("rate limit of %d per %s of its key: next start in %s", lim.Rate, lim.Per, tk.Wait.Round(time.Millisecond))
	}
	return "limit_full", fmt.Sprintf("concurrency limit of %d per key reached (%d running)", lim.Concurrency, tk.Held)
}
