package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// The dispatcher of the admission layer is distributed: whoever changes it admits what it allows
// in the same script (an enqueue's wait, an ending job's done) and delivers what was admitted; the
// sweep (SweepFair, every worker's Run) is the backstop for a process that died in between. Each
// admission is one atomic script per type, so no fence is needed: a job is admitted once, and its
// delivery carries its first delivery's id, which asynq refuses twice.

// ErrNotBlocked: SkipBlocked was asked to skip a job that does not block its sequence.
var ErrNotBlocked = errors.New("engine: job does not block its sequence")

// fairWaitTimeout bounds the admission writes made after the caller's request was answered.
const fairWaitTimeout = 5 * time.Second

// fairWait puts a new job of tc in its key's list (before its confirmation: a job abandoned after
// it is gone when its delivery starts, and frees its admission then). It returns what the wait
// admitted, to deliver after the confirmation (whose timeline event says the job waits).
// workflow is a node's "<workflow id>:<node id>" ("" none): its delivery carries it, and its wait
// is done once (a release decided twice waits once).
func (s *Stack) fairWait(ctx context.Context, tc TaskConfig, id, dedup string, spec Spec, workflow string) ([]jobstore.FairEntry, error) {
	key, d := s.firstFairDelivery(tc, dedup, spec, workflow)
	return s.waitDelivery(ctx, tc, key, id, d, workflow != "")
}

// firstFairDelivery is a new job's fair key and what its entry carries to its first delivery.
func (s *Stack) firstFairDelivery(tc TaskConfig, dedup string, spec Spec, workflow string) (string, fairDelivery) {
	d := fairDelivery{OpKey: spec.OpKey, Dedup: dedup, Headers: limitHeaders(tc, spec)}
	if workflow != "" {
		d.Headers = withHeader(d.Headers, HeaderWorkflow, workflow) // a copy: limitHeaders may be spec.Headers itself
	}
	if delay := firstDelay(spec); delay > 0 {
		d.Due = s.now().Add(delay).UnixMilli()
	}
	return tc.Fair.keyOf(spec), d
}

// waitDelivery puts job id in key's list with d, once if asked (see jobstore.Store.FairWait).
func (s *Stack) waitDelivery(ctx context.Context, tc TaskConfig, key, id string, d fairDelivery, once bool) ([]jobstore.FairEntry, error) {
	s.pumpParked(tc)
	if err := s.useFairLayout(ctx, tc); err != nil {
		return nil, err
	}
	sh := s.fairShardOf(tc, key)
	entries, err := s.store.FairWait(ctx, sh, key, id, encodeFairDelivery(d), tc.Fair.weightOf(key), s.fairPolicy(tc, sh), once)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	return entries, nil
}

// fairWaitingEvent is the timeline event of a job that waits for its key's turn, for a job whose
// record does not stand for it (a workflow node released to wait, a replay).
func fairWaitingEvent(tc TaskConfig, spec Spec) Event {
	return Event{Event: "waiting", Detail: jobstore.WaitingDetail(tc.Fair.keyOf(spec))}
}

// waitsForKey makes new job j of tc wait for its key's admission when tc is dispatched fairly;
// spec is the job's, payload in plaintext (a Fair.Key may read it). Its record keeps the key and
// stands for the waiting event (no timeline list is written for it).
func waitsForKey(j *jobstore.NewJob, tc TaskConfig, spec Spec) {
	if tc.Fair != nil {
		j.Waiting, j.FairKey = true, tc.Fair.keyOf(spec)
	}
}

// fairAdmitted is what one wait of tc admitted, to deliver once the waiting job is confirmed.
type fairAdmitted struct {
	tc      TaskConfig
	entries []jobstore.FairEntry
}

// deliverFairAdmitted delivers what several waits admitted (a bulk's, a workflow's).
func (s *Stack) deliverFairAdmitted(ctx context.Context, admitted []fairAdmitted) {
	for _, a := range admitted {
		s.deliverAdmittedAtOnce(ctx, a.tc, a.entries)
	}
}

// deliverAdmitted delivers each admitted job into asynq, with the delivery id its entry carries
// (its first, a replay's, or, from the sweep, the one its record names now): asynq
// refuses a second enqueue of it while it holds the first, so a delivery told twice (the
// dispatcher and the sweep) runs once. The job's record stays waiting until its start (one script
// fewer per job); a job that ended while it waited (cancelled, expired) or is gone (abandoned) is
// acknowledged at its start, which frees its admission. A failed enqueue leaves the job admitted
// and waiting, which the sweep delivers again.
// It returns how many went into asynq.
func (s *Stack) deliverAdmitted(ctx context.Context, client *asynq.Client, tc TaskConfig, entries []jobstore.FairEntry) int {
	if len(entries) == 0 {
		return 0
	}
	delivered := 0
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fairWaitTimeout)
	defer cancel()
	for _, e := range entries {
		d := decodeFairDelivery(e.Data)
		if e.Shard.Of > 1 {
			d.Headers = withHeader(d.Headers, HeaderFairShard, fairShardHeader(e.Shard))
		}
		delay := time.Duration(0)
		if d.Due > 0 {
			delay = max(time.UnixMilli(d.Due).Sub(s.now()), 0)
		}
		err := s.deliver(ctx, client, tc, e.JobID, DeliveryID(e.JobID, max(d.N, 1)), d.OpKey, d.Dedup, d.Headers, delay)
		switch {
		case err == nil:
			delivered++
			s.m.fairAdmitted.WithLabelValues(tc.Type).Inc()
		case !errors.Is(err, asynq.ErrTaskIDConflict):
			s.log.Warn().Err(err).Str("job_id", e.JobID).Str("event", "fair_deliver_failed").Msg("admitted job not delivered; the sweep tries again")
		}
	}
	return delivered
}

// fairEnded is told that job id of tc ended with status (or will never run: its record is gone):
// its admission is freed and the next jobs admitted and delivered (in the process's next batch of
// ends, fair_ends.go), unless a sequence that blocks on failure keeps its key for an operator.
// headers are its delivery's (nil: not known), which name the shard that admitted it. What it
// returns (nil: nothing to wait for) is closed once the batch has delivered what it admitted.
func (s *Stack) fairEnded(ctx context.Context, tc TaskConfig, id string, status jobstore.Status, headers map[string]string) <-chan struct{} {
	if tc.Fair == nil {
		return nil
	}
	shards := s.fairShardsOf(tc)
	if sh, ok := s.fairShardOfDelivery(tc, headers); ok {
		shards = []jobstore.FairShard{sh}
	}
	if !s.blocksSequence(tc, status) {
		var flushed <-chan struct{}
		for _, sh := range shards {
			flushed = s.fairEndLater(sh, id) // flushes run in turn: the last one's closes last
		}
		return flushed
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fairWaitTimeout)
	defer cancel()
	if keys, err := s.store.Keys(id, ""); err == nil {
		s.event(ctx, keys, Event{Event: "sequence_blocked", Detail: "its key's next jobs wait until an operator skips this job"})
	}
	for _, sh := range shards {
		// The key stays blocked, but the job's place of the capacity goes to the other keys:
		// otherwise a capacity's worth of blocked keys would stop the type for every key.
		entries, err := s.store.FairBlock(ctx, sh, id, s.fairPolicy(tc, sh))
		if err != nil {
			s.log.Warn().Err(err).Str("job_id", id).Str("event", "fair_block_failed").Msg("blocked job keeps its place of the capacity until it is skipped")
			continue
		}
		s.deliverAdmitted(ctx, s.wfClient, tc, entries)
	}
	return nil
}

func (s *Stack) blocksSequence(tc TaskConfig, status jobstore.Status) bool {
	return tc.Fair != nil && tc.Fair.Sequence && tc.Fair.BlockOnFailure && status == jobstore.StatusFailed
}

// SkipBlocked is the operator's action on a sequence blocked by job id, which failed for good:
// the job stays failed and its key's next job is admitted. ErrNotBlocked when the job is not
// failed or holds no admission.
func (s *Stack) SkipBlocked(ctx context.Context, id string) error {
	keys, err := s.store.Keys(id, "")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrJobNotFound, err)
	}
	v, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	tc, ok := s.TaskConfig(v.Raw[jobstore.FieldType])
	if !ok || tc.Fair == nil || jobstore.Status(v.Raw[jobstore.FieldStatus]) != jobstore.StatusFailed {
		return fmt.Errorf("%w: %s", ErrNotBlocked, id)
	}
	// The record does not say which shard holds it, nor which layout (the shard count may have
	// changed since it blocked): the others free nothing.
	shards, err := s.fairShardsEverywhere(ctx, tc)
	if err != nil {
		return err
	}
	skipped := false
	for _, sh := range shards {
		freed, entries, err := s.store.FairDone(ctx, sh, []string{id}, s.fairPolicy(tc, sh))
		if err != nil {
			return fmt.Errorf("engine: %w", err)
		}
		skipped = skipped || freed > 0
		s.deliverAdmitted(ctx, s.wfClient, tc, entries)
	}
	if !skipped {
		return fmt.Errorf("%w: %s", ErrNotBlocked, id)
	}
	s.event(ctx, keys, Event{Event: "sequence_skipped", Detail: "an operator let its key's next job run"})
	return nil
}

// SweepFair is the admission layer's backstop, for each fairly dispatched type: an admitted job
// not started is delivered again (asynq refuses a delivery it holds: only one that a dispatcher
// that died did not send goes in), an admitted job that ended or is gone without freeing its
// admission (its process died, it was cancelled or expired) is freed, and what the capacity allows
// is admitted. A type without a Capacity of its own gets the count of the live handlers that serve
// it (fair_capacity.go). It returns how many admissions it repaired (freed, or delivered again).
// Run calls it in every worker process, every RescueInterval.
func (s *Stack) SweepFair(ctx context.Context) (int, error) {
	types := s.fairTypes()
	if err := s.refreshFairHandlers(ctx, types); err != nil && ctx.Err() == nil {
		s.log.Warn().Err(err).Msg("live handlers not counted; the fair types admit by their last count")
	}
	repaired := 0
	for _, tc := range types {
		n, err := s.sweepFairType(ctx, tc)
		repaired += n
		if err != nil {
			return repaired, err
		}
	}
	return repaired, nil
}

// sweepFairType is SweepFair for tc: every shard of its layout, and of each layout it had before
// (fair_shards.go), which is forgotten once it holds nothing.
func (s *Stack) sweepFairType(ctx context.Context, tc TaskConfig) (int, error) {
	n := s.fairShards(tc)
	layouts, err := s.store.FairUseLayout(ctx, tc.Type, n)
	if err != nil {
		return 0, fmt.Errorf("engine: %w", err)
	}
	repaired := 0
	for _, m := range append([]int{n}, withoutLayout(layouts, n)...) {
		for _, sh := range jobstore.FairShards(tc.Type, m) {
			r, err := s.sweepFairShard(ctx, tc, sh)
			repaired += r
			if err != nil {
				return repaired, err
			}
		}
		if m == n {
			continue
		}
		empty, err := s.store.FairLayoutEmpty(ctx, tc.Type, m)
		if err == nil && empty {
			err = s.store.FairRetireLayout(ctx, tc.Type, m)
		}
		if err != nil {
			return repaired, fmt.Errorf("engine: %w", err)
		}
	}
	return repaired, nil
}

// sweepFairShard is SweepFair for shard sh of tc.
func (s *Stack) sweepFairShard(ctx context.Context, tc TaskConfig, sh jobstore.FairShard) (int, error) {
	admitted, err := s.store.FairAdmittedJobs(ctx, sh)
	if err != nil {
		return 0, fmt.Errorf("engine: %w", err)
	}
	ids := make([]string, len(admitted))
	for i, e := range admitted {
		ids[i] = e.JobID
	}
	records, err := s.store.FairRecords(ctx, ids)
	if err != nil {
		return 0, fmt.Errorf("engine: %w", err)
	}
	var again []jobstore.FairEntry
	var ended []string
	for i, e := range admitted {
		st := records[i].Status
		switch {
		case st == jobstore.StatusWaiting:
			// Admitted and not started: delivered again (asynq refuses it if it holds it), as the
			// delivery its record names now: a rescue of the admitted one gave it a new one.
			again = append(again, withDeliveryNumber(e, records[i].Deliveries))
		case s.runMayBeReturning(tc, records[i]):
			// Cancelled while running: its run's end frees it (cancelledRunReturned), so a
			// sequence's next job does not start beside a handler still returning.
		case (st == "" || st.Terminal()) && !s.blocksSequence(tc, st):
			ended = append(ended, e.JobID)
		}
	}
	p := s.fairPolicy(tc, sh)
	repaired, deliver, err := s.store.FairDone(ctx, sh, ended, p)
	if err != nil {
		return 0, fmt.Errorf("engine: %w", err)
	}
	more, err := s.pumpThrough(ctx, sh, p)
	if err != nil {
		return repaired, err
	}
	repaired += s.deliverAdmitted(ctx, s.wfClient, tc, again)
	s.deliverAdmittedAtOnce(ctx, tc, append(deliver, more...))
	return repaired, nil
}

// fairPumpCalls bounds the pump calls of one sweep of a shard: each passes over at most 1,024
// withdrawn entries (fair_admit.lua), so a key behind 10,000 cancelled jobs runs at this sweep,
// not ten sweeps later.
const fairPumpCalls = 64

// pumpThrough pumps shard sh until a call no longer stops at its skips' bound (at most
// fairPumpCalls calls), and returns what they admitted.
func (s *Stack) pumpThrough(ctx context.Context, sh jobstore.FairShard, p jobstore.FairPolicy) ([]jobstore.FairEntry, error) {
	var out []jobstore.FairEntry
	for range fairPumpCalls {
		admitted, more, err := s.store.FairPump(ctx, sh, p)
		out = append(out, admitted...)
		if err != nil {
			return out, fmt.Errorf("engine: %w", err)
		}
		if !more {
			break
		}
	}
	return out, nil
}

// cancelledRunGrace is how long after a cancel took a running job the sweep leaves its admission
// to the run's end: the run's keeper finds its lease gone within a third of the lease TTL, and
// its handler's context is cancelled then. Past it the sweep frees the admission (the run's
// process died, or its handler ignores its context: the raised fence refuses its writes).
func cancelledRunGrace(tc TaskConfig) time.Duration { return 2 * tc.LeaseTTL }

// runMayBeReturning says whether r is a job cancelled while running whose run may not have
// returned yet (within cancelledRunGrace of the cancel).
func (s *Stack) runMayBeReturning(tc TaskConfig, r jobstore.FairRecord) bool {
	return r.Status == jobstore.StatusCancelled && !r.CancelledRun.IsZero() && s.now().Sub(r.CancelledRun) < cancelledRunGrace(tc)
}

// withDeliveryNumber is admitted entry e delivered as its job's delivery number n, when n is past
// the one its admission carries.
func withDeliveryNumber(e jobstore.FairEntry, n int) jobstore.FairEntry {
	d := decodeFairDelivery(e.Data)
	if n > max(d.N, 1) {
		d.N = n
		e.Data = encodeFairDelivery(d)
	}
	return e
}

// FairTaskCheckInterval is the asynq TaskCheckInterval a server with fairly dispatched types gets
// when it sets none. A processor that finds its queues empty sleeps half to one and a half of it
// and starts nothing meanwhile, and a sequence's next job is delivered only at its predecessor's
// end: with asynq's 1 s, a lone sequence key of 20 jobs took 18 s in the template. The price is
// an idle server's polls (one dequeue script per served queue, 20 a second instead of 1).
const FairTaskCheckInterval = 50 * time.Millisecond

// HasFairTypes says whether a registered type is dispatched fairly.
func (s *Stack) HasFairTypes() bool { return len(s.fairTypes()) > 0 }

// FairTypeNames are the registered types dispatched fairly, by name.
func (s *Stack) FairTypeNames() []string {
	var out []string
	for _, tc := range s.fairTypes() {
		out = append(out, tc.Type)
	}
	slices.Sort(out)
	return out
}

// fairTypes are the registered types dispatched fairly.
func (s *Stack) fairTypes() []TaskConfig {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []TaskConfig
	for _, r := range s.types {
		if r.cfg.Fair != nil {
			out = append(out, r.cfg)
		}
	}
	return out
}

// FairCounts is a fairly dispatched type's admission counts, its capacity now and its top keys (at
// most top by backlog and top by running jobs), for the API and metrics.
func (s *Stack) FairCounts(ctx context.Context, typ string, top int) (jobstore.FairTop, error) {
	tc, ok := s.TaskConfig(typ)
	if !ok || tc.Fair == nil {
		return jobstore.FairTop{}, fmt.Errorf("%w: %q is not dispatched fairly", ErrUnknownType, typ)
	}
	return s.fairCountsOf(ctx, tc, top)
}

// fairCountsOf is FairCounts of tc, with the capacity that bounds its admissions now: its own, the
// live handlers' count, or this process's Concurrency (fair_capacity.go).
func (s *Stack) fairCountsOf(ctx context.Context, tc TaskConfig, top int) (jobstore.FairTop, error) {
	// Jobs that still wait in an old layout (a shard count changed) are counted too.
	old, err := s.fairOldLayouts(ctx, tc)
	if err != nil {
		return jobstore.FairTop{}, err
	}
	c, err := s.store.FairCounts(ctx, tc.Type, s.fairShards(tc), old, top)
	if err != nil {
		return c, fmt.Errorf("engine: %w", err)
	}
	switch {
	case tc.Fair.Capacity > 0:
		c.Capacity = int64(tc.Fair.Capacity)
	case c.LiveHandlers > 0:
		c.Capacity = c.LiveHandlers
	default:
		c.Capacity = int64(s.fairCapacity(tc))
	}
	return c, nil
}

// FairKeyCounts is one key's waiting and admitted-not-ended jobs of a fairly dispatched type,
// without the type's totals over the other keys (a tenant's view).
func (s *Stack) FairKeyCounts(ctx context.Context, typ, key string) (jobstore.FairKeyCount, error) {
	tc, ok := s.TaskConfig(typ)
	if !ok || tc.Fair == nil {
		return jobstore.FairKeyCount{}, fmt.Errorf("%w: %q is not dispatched fairly", ErrUnknownType, typ)
	}
	shards := []jobstore.FairShard{s.fairShardOf(tc, key)}
	old, err := s.fairOldLayouts(ctx, tc) // after a shard-count change, jobs may wait in the old one
	if err != nil {
		return jobstore.FairKeyCount{}, err
	}
	for _, m := range old {
		shards = append(shards, fairShardIn(tc.Type, key, m))
	}
	c, err := s.store.FairKeyCounts(ctx, key, shards...)
	if err != nil {
		return c, fmt.Errorf("engine: %w", err)
	}
	return c, nil
}
