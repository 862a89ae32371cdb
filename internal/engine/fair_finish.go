package engine

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// A fair job that ends in its finish frees its admission in the finish's round trip, on one Redis
// node: the done rides in the finish's pipeline, after it, and frees only if the record then holds
// the status the finish wrote (fair_done.lua), so a finish refused as stale frees nothing. The
// handler then delivers what the done admitted before its slot goes back to asynq, as the batched
// path does (fair_ends.go), without that path's round trip and hand-offs between goroutines. On a
// cluster the done would read the record in another slot: the batched path frees it there, as it
// does a done that did not free (a failed call, a finish that did not run first).

// fairDoneWithFinish is the done to send in job's finish when it ends with status (nil: the
// batched path frees it).
func (s *Stack) fairDoneWithFinish(job *Job, status jobstore.Status) *jobstore.FairDoneCall {
	tc := job.tc
	if tc.Fair == nil || !status.Terminal() || s.blocksSequence(tc, status) {
		return nil
	}
	if _, cluster := s.rdb.(*redis.ClusterClient); cluster {
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
