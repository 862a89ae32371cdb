package middleware

import (
	"context"
	"errors"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/engine"
)

// The lease level's limits per key are the engine's limiter (engine.Stack.TakeSlot): the same
// take, batched renewals, watch and release as a job's slot, the key from the task itself.

func (l LeaseLimit) on() bool { return l.Concurrency > 0 || l.Rate > 0 }

func (l LeaseLimit) engine() engine.Limit {
	return engine.Limit{Concurrency: l.Concurrency, Rate: l.Rate, Per: l.Per, Burst: l.Burst}
}

// keyOf is t's limit key, and whether t is limited.
func (l LeaseLimit) keyOf(t *asynq.Task) (string, bool) {
	if !l.on() {
		return "", false
	}
	if l.Key == nil {
		return "*", true
	}
	k := l.Key(t)
	return k, k != ""
}

// takeSlot takes a slot of t's limit key for owner before its lease (nil when t is not limited).
// A delivery over the limit bounces; one on its last retry waits for a slot here instead (asynq
// archives a task whose retries are spent before it asks IsFailure), asking again as slots lapse
// or the rate's next start comes, until ctx ends.
func (g *Guard) takeSlot(ctx context.Context, t *asynq.Task, l Lease, owner string) (*engine.Slot, error) {
	key, ok := l.Limit.keyOf(t)
	if !ok {
		return nil, nil
	}
	retried, _ := asynq.GetRetryCount(ctx)
	maxRetry, _ := asynq.GetMaxRetry(ctx)
	for wait := 10 * time.Millisecond; ; wait = min(wait*2, time.Second) {
		sl, err := g.stack.TakeSlot(ctx, t.Type(), l.Limit.engine(), key, owner, l.TTL)
		var over *engine.OverLimitError
		switch {
		case err == nil:
			return sl, nil
		case ctx.Err() != nil:
			return nil, engine.Bounce("cancelled", 0, context.Cause(ctx))
		case !errors.As(err, &over):
			// Unknown whether it took a slot: one it took lapses within its TTL.
			return nil, engine.Bounce("start_failed", 0, err)
		case retried < maxRetry:
			after := time.Duration(0)
			if over.Reason == "limit_rate" {
				after = over.Wait
			}
			return nil, engine.Bounce(over.Reason, after, over)
		}
		pause := min(wait, max(over.Wait, time.Millisecond))
		if over.Reason == "limit_rate" {
			pause = over.Wait
		}
		select {
		case <-ctx.Done():
			return nil, engine.Bounce("cancelled", 0, context.Cause(ctx))
		case <-time.After(pause):
		}
	}
}
