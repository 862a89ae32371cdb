package engine

import (
	"context"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// fairWithdraw takes job id of tc, which has just ended (cancelled, expired) while it was from
// (waiting; or held: a workflow node whose release waited and did not make it waiting yet), off
// its key's backlog, so that the API, /metrics and the jobs page stop counting it now rather than
// when its turn comes (jobstore.Store.FairWithdraw). info is what its record said before it
// ended. Best effort: a job not withdrawn stays counted until the admission reaches it, which
// acknowledges it at its start, as before.
func (s *Stack) fairWithdraw(ctx context.Context, tc TaskConfig, id string, from jobstore.Status, info jobstore.CancelInfo) {
	if tc.Fair == nil || (from != jobstore.StatusWaiting && from != jobstore.StatusHeld) {
		return
	}
	key := info.FairKey
	if !info.Confirmed {
		key = "" // its wait may not have run yet: only a once entry proves it did
	}
	shards := s.fairShardsOf(tc) // a node's or a replay's wait names its key in its shard's once hash
	if key != "" {
		shards = []jobstore.FairShard{s.fairShardOf(tc, key)}
	}
	for _, sh := range shards {
		ok, err := s.store.FairWithdraw(ctx, sh, id, key)
		if err != nil {
			s.log.Warn().Err(err).Str("job_id", id).Str("event", "fair_withdraw_failed").
				Msg("ended job stays in its key's backlog count until its turn")
			return
		}
		if ok {
			return
		}
	}
}
