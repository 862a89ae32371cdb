package engine

import (
	"sync"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// A sharded queue is a logical queue spread over several asynq queues (its shards), each under
// its own hash tag so that a Redis Cluster can put them on different masters. A job's shard
// follows from its resource tag, which its id carries: one resource's deliveries, rescues and
// replays all go to one shard, and any process finds a job's shard from its id alone.

// shardTable maps a logical queue to the shard queues its jobs are spread over.
type shardTable struct {
	mu     sync.RWMutex
	shards map[string][]string
}

// ShardQueue spreads the deliveries of every type whose queue is queue over names (the shard
// queues, in a fixed order every process shares); fewer than two names undo it.
func (s *Stack) ShardQueue(queue string, names []string) {
	t := &s.shards
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.shards == nil {
		t.shards = map[string][]string{}
	}
	if len(names) < 2 {
		delete(t.shards, queue)
		return
	}
	t.shards[queue] = append([]string(nil), names...)
}

// queueOf is the asynq queue of job id's deliveries: its shard of queue when queue is sharded.
func (s *Stack) queueOf(queue, id string) string {
	t := &s.shards
	t.mu.RLock()
	names := t.shards[queue]
	t.mu.RUnlock()
	if len(names) == 0 {
		return queue
	}
	tag, err := TagOf(id)
	if err != nil {
		return queue
	}
	return names[ShardIndex(tag, len(names))]
}

// recordQueue is the asynq queue of job id's later deliveries (rescues, replays, repairs, a
// workflow node's release): the one its record names, so a job stays in the shard it was created
// in even after the shard count changed, and Cancel, the sweep and the reconciler find its delivery
// where the record says; the job's shard of queue when the record names none.
func (s *Stack) recordQueue(queue, id, recorded string) string {
	if recorded != "" {
		return recorded
	}
	return s.queueOf(queue, id)
}

// ShardIndex is which of n shards the jobs of resource tag tag (16 hex digits, ResourceTag) go
// to: the tag's first 8 hex digits modulo n (jobstore.StripeOf, as the indexes' stripes), so
// resources spread evenly and never move while n stays.
func ShardIndex(tag string, n int) int { return jobstore.StripeOf(tag, n) }
