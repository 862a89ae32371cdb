package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// A request that gave up on Redis (its deadline passed) has answered "not accepted"; a write it
// sent may still sit in a stalled Redis's buffers and run later. Each write an enqueue makes
// carries the request's deadline, in Redis's clock, and a script that runs past it writes nothing.

// deadlineMargin is taken off the caller's deadline: a write that ran just in time still has to
// travel back before the caller stops waiting for it.
const deadlineMargin = 250 * time.Millisecond

// claimSlack is how long past its writer's deadline a record waiting for its confirmation lives:
// enough for the clock estimate's error, short enough that a refused request leaves nothing for
// long.
const claimSlack = time.Second

// SyncClock measures how far Redis's clock is from this process's, once; writes with a deadline
// use it to say the deadline in Redis's clock. Without it the offset is taken to be zero.
func (s *Stack) SyncClock(ctx context.Context) error {
	sent := time.Now()
	t, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return fmt.Errorf("engine: read redis clock: %w", err)
	}
	mid := sent.Add(time.Since(sent) / 2)
	s.clockOffset.Store(int64(t.Sub(mid)))
	return nil
}

// ClockOffset is Redis's clock minus this process's, as SyncClock measured it.
func (s *Stack) ClockOffset() time.Duration { return time.Duration(s.clockOffset.Load()) }

// WriteDeadline is the unix ms, in Redis's clock, after which a script run for ctx must write
// nothing; 0 when ctx has no deadline.
func (s *Stack) WriteDeadline(ctx context.Context) int64 {
	d, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	return d.Add(-deadlineMargin).Add(s.ClockOffset()).UnixMilli()
}

// ClaimTTL is how long something written for ctx before its confirmation may live: until ctx's
// deadline plus claimSlack, or fallback when ctx has none.
func ClaimTTL(ctx context.Context, fallback time.Duration) time.Duration {
	d, ok := ctx.Deadline()
	if !ok {
		return fallback
	}
	return max(time.Until(d)+claimSlack, claimSlack)
}

// deadlinePrelude defines past_deadline(ms) for the scripts that carry a deadline.
var deadlinePrelude = func() string {
	b, err := scriptFS.ReadFile("scripts/deadline_prelude.lua")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

// NewDeadlineScript builds a script whose body may call past_deadline(ms) (see
// scripts/deadline_prelude.lua) with a deadline from WriteDeadline.
func NewDeadlineScript(body string) *redis.Script {
	return redis.NewScript(deadlinePrelude + "\n" + body)
}
