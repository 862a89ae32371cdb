package engine

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// A fair job that ends in its finish frees its admission in the finish's round trip, on one Redis
// node: the done rides in the finish's pipeline, after it, and frees only if the record then holds
// the status and finished_at that finish wrote (fair_done.lua), so a finish refused as stale frees
// nothing. The handler then delivers what the done admitted before its slot goes back to asynq, as
// the batched path does (fair_ends.go), without that path's round trip and hand-offs between
// goroutines. The batched path frees it instead:
//   - on a cluster, where the done would read the record in another slot;
//   - in durable mode, where the finish counts only once the replicas have it (a WAIT after the
//     pipeline): a sequence's next job must not be admitted on a finish a failover may lose;
//   - after a done that freed nothing or failed (a finish that did not run first).
// A pipeline whose reply was lost leaves what its done admitted to the sweep, which delivers an
// admitted job not started.

// fairDoneWithFinish is the done to send in job's finish when it ends with status (nil: the
// batched path frees it).
func (s *Stack) fairDoneWithFinish(job *Job, status jobstore.Status) *jobstore.FairDoneCall {
	tc := job.tc
	if tc.Fair == nil || !status.Terminal() || s.blocksSequence(tc, status) {
		return nil
	}
	if _, cluster := s.rdb.(*redis.ClusterClient); cluster || s.store.Durability().On() {
		return nil
	}
	sh, ok := s.fairShardOfDelivery(tc, job.Headers)
	if !ok {
		return nil
	}
	s.pumpParked(tc)
	return &jobstore.FairDoneCall{Shard: sh, Policy: s.fairPolicy(tc, sh), Status: status}
}

// fairFinished delivers what job's finish admitted with its done (done nil: none was sent), and
// reports whether the done freed the job's admission.
func (s *Stack) fairFinished(ctx context.Context, job *Job, done *jobstore.FairDoneCall, a jobstore.FairDoneAnswer) bool {
	if done == nil {
		return false
	}
	if a.Err != nil {
		s.log.Warn().Err(a.Err).Str("job_id", job.ID).Str("event", "fair_done_failed").Msg("admission freed by the next batch of ends")
	}
	s.deliverAdmittedAtOnce(ctx, job.tc, a.Admitted)
	return a.Freed > 0
}
