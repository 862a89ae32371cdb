package engine

import (
	"context"
	"hash/fnv"
	"sync"
	"time"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// The ends of fairly dispatched jobs that do not free their admissions in their finish's round
// trip (fair_finish.go: on a cluster, in durable mode, and every end that is not a finish) free
// them in batches, off the handlers' goroutines: an end queues its job id, and one flush per
// process frees every end queued meanwhile in one done script, then delivers what it admitted, a
// few enqueues at once on the bulk client (shared pipelines). The handler gives its slot back once
// its flush has delivered (awaitFairFlush). While a flush runs its round trips the next ends pile
// up, so under load one script frees many ends; alone, an end is flushed at once. A process that
// dies with ends queued leaves them to the sweep, like a process that died before its done.

// fairEndsMax bounds the ids of one done script (a short script, whatever piled up).
const fairEndsMax = 256

// fairDeliverers is how many admitted jobs one flush delivers at once. The jobs of one key go
// through one deliverer, in their admission order.
const fairDeliverers = 8

// fairEnds holds the ended jobs' ids, per shard of a task type, until the next flush.
type fairEnds struct {
	mu       sync.Mutex
	ids      map[jobstore.FairShard][]string
	flushed  chan struct{} // closed once the queued ids are freed and what they admitted delivered
	flushing bool
	wg       sync.WaitGroup
}

// add queues id, an ended job admitted by shard sh; it reports whether a flush must be started,
// and returns what is closed once id's flush has delivered what it admitted.
func (q *fairEnds) add(sh jobstore.FairShard, id string) (start bool, flushed <-chan struct{}) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ids == nil {
		q.ids = map[jobstore.FairShard][]string{}
		q.flushed = make(chan struct{})
	}
	q.ids[sh] = append(q.ids[sh], id)
	if q.flushing {
		return false, q.flushed
	}
	q.flushing = true
	q.wg.Add(1)
	return true, q.flushed
}

// take empties the queue, with what to close once its ids are flushed; nil (and no flush running
// any more) when it was empty.
func (q *fairEnds) take() (map[jobstore.FairShard][]string, chan struct{}) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ids, flushed := q.ids, q.flushed
	q.ids, q.flushed = nil, nil
	if len(ids) == 0 {
		q.flushing = false
	}
	return ids, flushed
}

// fairEndLater queues the end of job id, admitted by shard sh, for the next flush, starting one if
// none runs; what it returns is closed once that flush has delivered what it admitted.
func (s *Stack) fairEndLater(sh jobstore.FairShard, id string) <-chan struct{} {
	start, flushed := s.fairEnds.add(sh, id)
	if start {
		go s.flushFairEnds()
	}
	return flushed
}

// fairFlushWait bounds how long a handler's end waits for its flush (a Redis that answers slowly
// must not hold the handler's slot: the flush goes on without it).
const fairFlushWait = time.Second

// awaitFairFlush waits, at a handler's end, until its end's flush has delivered what it admitted
// (flushed nil: nothing to wait for), at most fairFlushWait. Only then is the handler's slot given
// back to asynq, whose processor dequeues at once and finds the admitted job: one that finds the
// queue empty sleeps half to one and a half TaskCheckInterval (1 s by default), starting nothing
// meanwhile. Without the wait, a type whose Capacity equals its handlers drained 157 no-op jobs a
// second against 3,260 without fair dispatch (BenchmarkFairManyKeys, asynq's default interval).
func awaitFairFlush(flushed <-chan struct{}) {
	if flushed == nil {
		return
	}
	t := time.NewTimer(fairFlushWait)
	defer t.Stop()
	select {
	case <-flushed:
	case <-t.C:
	}
}

// flushFairEnds frees the queued ends until none is left.
func (s *Stack) flushFairEnds() {
	defer s.fairEnds.wg.Done()
	for {
		batch, flushed := s.fairEnds.take()
		if len(batch) == 0 {
			return
		}
		s.freeBatch(batch)
		close(flushed)
	}
}

// freeBatch frees a flush's ends, each shard's at once.
func (s *Stack) freeBatch(batch map[jobstore.FairShard][]string) {
	if len(batch) == 1 {
		for sh, ids := range batch { // one shard (the common case): no goroutine for it
			s.freeShardEnds(sh, ids)
		}
		return
	}
	// Each shard's ends at once: a shard is a slot of its own (another master on a cluster),
	// and one waiting for another's round trips would leave its freed capacity idle.
	var wg sync.WaitGroup
	for sh, ids := range batch {
		wg.Go(func() { s.freeShardEnds(sh, ids) })
	}
	wg.Wait()
}

// freeShardEnds frees ids, ended jobs admitted by shard sh, fairEndsMax a call.
func (s *Stack) freeShardEnds(sh jobstore.FairShard, ids []string) {
	tc, ok := s.TaskConfig(sh.Type)
	if !ok || tc.Fair == nil {
		return
	}
	for len(ids) > 0 {
		n := min(len(ids), fairEndsMax)
		s.freeFairEnds(tc, sh, ids[:n])
		ids = ids[n:]
	}
}

// freeFairEnds frees the admissions of ids, ended jobs of tc admitted by shard sh, and delivers
// what that admitted.
func (s *Stack) freeFairEnds(tc TaskConfig, sh jobstore.FairShard, ids []string) {
	s.pumpParked(tc)
	ctx, cancel := context.WithTimeout(context.Background(), fairWaitTimeout)
	defer cancel()
	_, entries, err := s.store.FairDone(ctx, sh, ids, s.fairPolicy(tc, sh))
	if err != nil {
		s.log.Warn().Err(err).Int("jobs", len(ids)).Str("event", "fair_done_failed").Msg("admissions not freed; the sweep frees them")
		return
	}
	s.deliverAdmittedAtOnce(ctx, tc, entries)
}

// deliverAdmittedAtOnce delivers entries with up to fairDeliverers enqueues in flight, each key's
// jobs in order; it returns how many went into asynq.
func (s *Stack) deliverAdmittedAtOnce(ctx context.Context, tc TaskConfig, entries []jobstore.FairEntry) int {
	if len(entries) <= 1 {
		return s.deliverAdmitted(ctx, s.bulkClient, tc, entries)
	}
	groups := make([][]jobstore.FairEntry, min(len(entries), fairDeliverers))
	for _, e := range entries {
		h := fnv.New32a()
		_, _ = h.Write([]byte(e.Key))
		g := int(h.Sum32() % uint32(len(groups)))
		groups[g] = append(groups[g], e)
	}
	// The first group goes on this goroutine, whose stack the done's round trip already grew; a
	// goroutine of its own would grow one again through the client's calls.
	var wg sync.WaitGroup
	var mu sync.Mutex
	delivered := 0
	for _, g := range groups[1:] {
		if len(g) == 0 {
			continue
		}
		wg.Go(func() {
			n := s.deliverAdmitted(ctx, s.bulkClient, tc, g)
			mu.Lock()
			delivered += n
			mu.Unlock()
		})
	}
	n := s.deliverAdmitted(ctx, s.bulkClient, tc, groups[0])
	mu.Lock()
	delivered += n
	mu.Unlock()
	wg.Wait()
	return delivered
}
