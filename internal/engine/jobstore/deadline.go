package jobstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/locking"
)

// A request that gave up on Redis (its deadline passed) has answered "not accepted"; a write it
// sent may still sit in a stalled Redis's buffers and run later. Each write an enqueue makes
// carries the request's deadline, in Redis's clock, and a script that runs past it writes nothing.

// DeadlineMargin is taken off the caller's deadline: a write that ran just in time still has to
// travel back before the caller stops waiting for it.
const DeadlineMargin = 250 * time.Millisecond

// ClaimSlack is how long past its writer's deadline a record waiting for its confirmation lives:
// enough for the clock estimate's error, short enough that a refused request leaves nothing for
// long.
const ClaimSlack = time.Second

// SyncClock measures how far Redis's clock is from this process's, once; writes with a deadline
// use it to say the deadline in Redis's clock. Without it the offset is taken to be zero.
func (s *Store) SyncClock(ctx context.Context) error {
	sent := time.Now()
	t, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return fmt.Errorf("jobstore: read redis clock: %w", err)
	}
	mid := sent.Add(time.Since(sent) / 2)
	s.clockOffset.Store(int64(t.Sub(mid)))
	return nil
}

// ClockOffset is Redis's clock minus this process's, as SyncClock measured it.
func (s *Store) ClockOffset() time.Duration { return time.Duration(s.clockOffset.Load()) }

// WriteDeadline is the unix ms, in Redis's clock, after which a script run for ctx must write
// nothing; 0 when ctx has no deadline.
func (s *Store) WriteDeadline(ctx context.Context) int64 {
	d, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	return s.RedisTime(d.Add(-DeadlineMargin))
}

// RedisTime is t in Redis's clock, in unix ms.
func (s *Store) RedisTime(t time.Time) int64 { return t.Add(s.ClockOffset()).UnixMilli() }

// ClaimTTL is how long something written for ctx before its confirmation may live: until ctx's
// deadline plus ClaimSlack, or fallback when ctx has none.
func ClaimTTL(ctx context.Context, fallback time.Duration) time.Duration {
	d, ok := ctx.Deadline()
	if !ok {
		return fallback
	}
	return max(time.Until(d)+ClaimSlack, ClaimSlack)
}

// NewScript builds a script from body with the helpers the job scripts have: locking's protocol
// fragment and the job prelude (past_deadline for a deadline from WriteDeadline, record_get,
// timeline_push, event; see scripts/prelude.lua).
func NewScript(body string) *redis.Script {
	return locking.NewProtocolScript(locking.Compose(body, prelude))
}
