package middleware

import (
	"context"
	"fmt"
	"maps"

	"github.com/jobguard/jobguard/internal/engine"
)

// Fair turns on fair, ordered dispatch for a job-level type (Job.Fair): its jobs wait in
// jobguard's admission layer in Redis, one list per key, and are admitted into asynq as the type's
// capacity frees, in weighted round-robin across keys and in enqueue order within a key. A key's
// thousands of jobs do not stand in front of another key's one; a key at its Limit.Concurrency
// keeps its jobs waiting without bouncing; a Sequence runs one job per key at a time, in order.
// A job waiting for its turn has status "waiting" and a waiting event on its timeline; cancel
// works on it (it never starts). See docs/FAIRNESS.md for what is guaranteed and what it costs.
type Fair struct {
	// Key is a job's fair key from its enqueue options (nil: its tenant).
	Key func(EnqueueOptions) string
	// Weights are the weights of named keys (default 1): under contention a key of weight 5 is
	// admitted five times as often as a key of weight 1. A key alone gets the whole capacity.
	Weights map[string]int
	// Capacity is the most jobs of the type admitted into asynq and not ended, across every
	// process. Default: the handlers of the live asynq servers that serve the type's queue, summed
	// over the workers, counted every 5 s by one worker's Guard.Run (Config.Concurrency until a
	// first count). A margin above the handlers (up to twice) keeps asynq's queue from running dry
	// between an end and the next admission under load.
	Capacity int
	// Sequence runs a key's jobs one at a time in enqueue order, across retries, rescues and
	// worker deaths.
	Sequence bool
	// BlockOnFailure: a sequence job that fails for good blocks its key until
	// Guard.SkipBlocked (default false: the key's next job is admitted).
	BlockOnFailure bool
	// Shards spreads the type's admission state over n Redis Cluster slots on different masters
	// (default 1; at most Capacity), for more fair jobs of one type than one master admits (about
	// 9,000 a second). Each shard admits its share of Capacity; a key's jobs wait in one shard, so
	// its order and limits stay exact, but a lone key gets only its shard's share, and weights
	// hold between the keys of one shard. Change it only while the type has nothing waiting.
	Shards int
}

// ErrNotBlocked: SkipBlocked was asked to skip a job that does not block its sequence.
var ErrNotBlocked = engine.ErrNotBlocked

func (f *Fair) engine() *engine.Fair {
	if f == nil {
		return nil
	}
	ef := &engine.Fair{Weights: maps.Clone(f.Weights), Capacity: f.Capacity, Sequence: f.Sequence, BlockOnFailure: f.BlockOnFailure,
		Shards: f.Shards}
	if f.Key != nil {
		key := f.Key
		ef.Key = func(s engine.Spec) string { return key(optionsOf(s)) }
	}
	return ef
}

// SkipBlocked lets the sequence blocked by job id (failed for good, under BlockOnFailure) go on:
// the job stays failed, and its key's next job is admitted. ErrNotBlocked when it blocks nothing.
func (g *Guard) SkipBlocked(ctx context.Context, id string) error {
	if err := g.stack.SkipBlocked(ctx, id); err != nil {
		return fmt.Errorf("middleware: %w", err)
	}
	return nil
}

// FairKey is one key's jobs in the admission layer: waiting, and admitted and not ended.
type FairKey struct {
	Key              string
	Waiting, Running int64
}

// FairCounts is a fairly dispatched type's admission layer at a glance.
type FairCounts struct {
	// Admitted: jobs admitted into asynq and not ended (what Capacity bounds); WaitingKeys: keys
	// with jobs waiting.
	Admitted, WaitingKeys int64
	// Capacity is what bounds Admitted now: Fair.Capacity, or the live handlers that serve the
	// type as last counted (Config.Concurrency before a first count).
	Capacity int64
	// Top are the keys with the most waiting jobs and those with the most running, at most top of
	// each (bounded whatever the number of keys).
	Top []FairKey
}

// FairCounts reads type typ's admission counts and its top keys.
func (g *Guard) FairCounts(ctx context.Context, typ string, top int) (FairCounts, error) {
	c, err := g.stack.FairCounts(ctx, typ, top)
	if err != nil {
		return FairCounts{}, fmt.Errorf("middleware: %w", err)
	}
	out := FairCounts{Admitted: c.Admitted, WaitingKeys: c.WaitingKeys, Capacity: c.Capacity}
	for _, k := range c.TopKeys {
		out.Top = append(out.Top, FairKey{Key: k.Key, Waiting: k.Backlog, Running: k.Running})
	}
	return out, nil
}
