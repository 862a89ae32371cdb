package middleware

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jobguard/jobguard/internal/engine"
)

// Shards is a logical queue spread over several asynq queues (its shards), each under a hash tag
// of its own, so that a Redis Cluster dequeues and completes its tasks on several masters instead
// of one. A job goes to the shard of its resource: one resource's tasks stay on one shard.
//
// Guard.ShardQueue picks the names from the cluster's slot map and records them in Redis, so every
// process, and every restart, uses the same ones; on a single Redis the shards just share it.
type Shards struct {
	// Queue is the logical queue (a job-level type's Job.Queue).
	Queue string
	// Names are the shard queues enqueues spread over; Names[0] is Queue itself, so tasks enqueued
	// before the queue was sharded are still served.
	Names []string
	// Retired are the shards an earlier, larger count recorded: nothing new is sent there, but the
	// workers keep serving them (ServerQueues), so no task is left behind when the count shrinks.
	Retired []string
}

// MaxShards bounds the shards of one logical queue: each shard costs every server a dequeue
// attempt when it is empty, and asynq's background loops one pass each.
const MaxShards = 64

// ErrShards: a shard count out of range, or shards the record in Redis cannot give.
var ErrShards = errors.New("middleware: queue shards")

// For is the shard queue of resource's tasks: asynq.Queue(s.For(resource)) for a lease-level
// task sent with a plain asynq client. A job-level type's jobs are routed by Guard.Enqueue itself.
func (s Shards) For(resource string) string {
	if len(s.Names) == 0 {
		return s.Queue
	}
	return s.Names[engine.ShardIndex(engine.ResourceTag(resource), len(s.Names))]
}

// All are the queues the workers serve: Names, then Retired.
func (s Shards) All() []string { return append(slices.Clone(s.Names), s.Retired...) }

// ShardQueue spreads logical queue queue over n shard queues and returns them. Job-level types
// whose Job.Queue is queue send each job to its resource's shard from then on (Enqueue, retries,
// rescues, replays); Status, Cancel and the lists find a job whatever its shard. The names are
// recorded under <prefix>:{shards:<queue>} (kept while the queue is in use: it has no TTL), so
// every process and every restart agrees on them; a count larger than the record adds shards on
// the masters that hold the fewest of them, a smaller one retires the last ones (still served).
// Call it at start, in every process that enqueues or serves the queue, before the server starts.
func (g *Guard) ShardQueue(ctx context.Context, queue string, n int) (Shards, error) {
	if queue == "" || n < 1 || n > MaxShards {
		return Shards{}, fmt.Errorf("%w: %q over %d shards (1-%d)", ErrShards, queue, n, MaxShards)
	}
	key := g.locks.Tag("shards:" + queue)
	recorded, err := g.rdb.LRange(ctx, key, 0, -1).Result()
	if err != nil {
		return Shards{}, fmt.Errorf("%w: read %s's record: %w", ErrShards, queue, err)
	}
	if len(recorded) < n {
		masters, err := slotMap(ctx, g.rdb)
		if err != nil {
			return Shards{}, fmt.Errorf("%w: %w", ErrShards, err)
		}
		more := pickShards(queue, recorded, n-len(recorded), masters)
		res, err := shardsGrowScript.Run(ctx, g.rdb, []string{key}, append([]any{len(recorded)}, toAny(more)...)...).StringSlice()
		if err != nil {
			return Shards{}, fmt.Errorf("%w: record %s's shards: %w", ErrShards, queue, err)
		}
		recorded = res
	}
	if len(recorded) < n || recorded[0] != queue {
		return Shards{}, fmt.Errorf("%w: %s's record holds %d names, want at least %d starting with the queue", ErrShards, queue, len(recorded), n)
	}
	s := Shards{Queue: queue, Names: recorded[:n:n], Retired: recorded[n:]}
	g.stack.ShardQueue(queue, s.Names)
	return s, nil
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// ServerQueues is asynq.Config.Queues for a server that serves the logical queues of queues
// (name: priority, as asynq takes them), each sharded one replaced by all its shards (Shards.All).
// The shares between logical queues stay what queues says: without strict priority a logical
// queue's shards split its priority (every priority is scaled by the shard counts' least common
// multiple, which asynq divides back out); with strict, each shard keeps its queue's priority, so
// asynq still drains a higher logical queue's every shard before a lower one's.
//
//	cfg.Queues = middleware.ServerQueues(map[string]int{"critical": 6, "default": 3}, cfg.StrictPriority, defaultShards)
func ServerQueues(queues map[string]int, strict bool, shards ...Shards) map[string]int {
	of := map[string][]string{}
	scale := 1
	for _, s := range shards {
		if _, ok := queues[s.Queue]; !ok {
			continue
		}
		all := s.All()
		if len(all) == 0 {
			all = []string{s.Queue}
		}
		of[s.Queue] = all
		scale = lcm(scale, len(all))
	}
	out := make(map[string]int, len(queues))
	for q, priority := range queues {
		names, sharded := of[q]
		if !sharded {
			names = []string{q}
		}
		for _, name := range names {
			switch {
			case strict:
				out[name] = priority
			default:
				out[name] = priority * scale / len(names)
			}
		}
	}
	return out
}

func lcm(a, b int) int {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return a / x * b
}
