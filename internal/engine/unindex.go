package engine

import (
	"context"
	"sync"
)

// Every confirmed job waits in the expiry index until it falls due, about a retention after its
// creation; one that ends before only leaves when the sweep reaches it. So for most of its
// retention a finished job pays for an index entry (about 130 B of Redis) that nothing needs. The
// jobs this process ends done or revoked (final: only a failed job can be replayed, and a replay
// indexes it again) leave the index in one ZREM at the next sweep (ExpireDue). Best effort: a job
// left behind, by a full queue or a process that died, leaves at its due time as before.

// unindexMax bounds the ids a process holds for the next sweep.
const unindexMax = 50_000

// unindexQueue holds the ids of jobs that ended for good, for the next sweep.
type unindexQueue struct {
	mu  sync.Mutex
	ids []string
}

// add queues id unless the queue is full.
func (q *unindexQueue) add(id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.ids) < unindexMax {
		q.ids = append(q.ids, id)
	}
}

// take empties the queue.
func (q *unindexQueue) take() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	ids := q.ids
	q.ids = nil
	return ids
}

// unindexEnded takes the queued jobs out of the expiry index, a thousand per command.
func (s *Stack) unindexEnded(ctx context.Context) error {
	ids := s.unindex.take()
	for len(ids) > 0 {
		n := min(len(ids), 1000)
		if err := s.store.Unindex(ctx, ids[:n]...); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}
