package engine

import (
	"context"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// fairWithdraw takes job id of tc, which has just ended (cancelled, expired) while it was from
// (waiting; or held: a workflow node whose release waited and did not make it waiting yet), off
// its key's backlog, so that the API, /metrics and the jobs page stop counting it now rather than
// when its turn comes (jobstore.Store.FairWithdraw). info is what its record said before it
// ended. It runs on a context of its own: the caller's request may be gone, and the count would
// stay wrong. Best effort: a job not withdrawn stays counted until the admission reaches it, which
// acknowledges it at its start, as before.
func (s *Stack) fairWithdraw(ctx context.Context, tc TaskConfig, id string, from jobstore.Status, info jobstore.CancelInfo) {
	if tc.Fair == nil || (from != jobstore.StatusWaiting && from != jobstore.StatusHeld) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fairWaitTimeout)
	defer cancel()
	// Where its key's jobs wait now. A node's or a replay's record names no key: the tenant is the
	// key unless the type has a Key function of its own (which may read the payload), and then
	// every shard is looked in (a workflow of 1,000 held nodes cancelled over 16 shards was 16,000
	// round trips).
	key := info.FairKey
	if key == "" && tc.Fair.Key == nil {
		key = tc.Fair.keyOf(Spec{Tenant: info.Tenant})
	}
	shards := s.fairShardsOf(tc)
	if key != "" {
		shards = []jobstore.FairShard{s.fairShardOf(tc, key)}
	}
	if done, failed := s.withdrawFrom(ctx, shards, id); done || failed {
		return
	}
	// Else it may wait in an old layout (a shard count changed while jobs waited).
	old, err := s.fairOldLayouts(ctx, tc)
	if err != nil {
		s.log.Warn().Err(err).Str("job_id", id).Str("event", "fair_withdraw_failed").
			Msg("ended job stays in its key's backlog count until its turn")
		return
	}
	for _, m := range old {
		shards = jobstore.FairShards(tc.Type, m)
		if key != "" {
			shards = []jobstore.FairShard{fairShardIn(tc.Type, key, m)}
		}
		if done, failed := s.withdrawFrom(ctx, shards, id); done || failed {
			return
		}
	}
}

// withdrawFrom withdraws job id from the first of shards whose lists hold it: done when one did,
// failed when Redis did not answer (logged).
func (s *Stack) withdrawFrom(ctx context.Context, shards []jobstore.FairShard, id string) (done, failed bool) {
	for _, sh := range shards {
		ok, err := s.store.FairWithdraw(ctx, sh, id)
		if err != nil {
			s.log.Warn().Err(err).Str("job_id", id).Str("event", "fair_withdraw_failed").
				Msg("ended job stays in its key's backlog count until its turn")
			return false, true
		}
		if ok {
			return true, false
		}
	}
	return false, false
}
