package engine

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// A fair job's wait rides in its create's round trip where nothing can refuse the job after the
// create has run: on one Redis node (a pipeline runs in order there; on a cluster the two would
// reach different masters in no order), without a caller's gate (Spec.Alongside: a request it
// refuses would leave an entry for a job that is not, and a refused flood as many), without a dedup
// (a duplicate's create answers another job) and with an id of the stack's own (a caller's may name
// a job that exists). The enqueue then costs create, confirm and delivery of what the wait
// admitted, like a job without fair dispatch, not one round trip more.

// fairWaited is a new job's wait sent with its create: what it admitted, to deliver once the job is
// confirmed.
type fairWaited struct {
	admitted []jobstore.FairEntry
}

// waitsWithCreate says whether a new job of tc from spec waits in its create's round trip.
func (s *Stack) waitsWithCreate(tc TaskConfig, spec Spec, dedup string) bool {
	if tc.Fair == nil || spec.Alongside != nil || dedup != "" || spec.JobID != "" {
		return false
	}
	_, cluster := s.rdb.(*redis.ClusterClient)
	return !cluster
}

// createWaiting creates job j of tc with its wait in the same pipeline. waited is nil when the
// wait did not run (the create did not run before it, or refused): the enqueue then waits on its
// own if the job was created.
func (s *Stack) createWaiting(ctx context.Context, keys jobstore.Keys, j jobstore.NewJob, tc TaskConfig, dedup string, spec Spec) (jobstore.CreateState, string, *fairWaited, error) {
	s.pumpParked(tc)
	if err := s.useFairLayout(ctx, tc); err != nil {
		return "", "", nil, err
	}
	key, d := s.firstFairDelivery(tc, dedup, spec, "")
	sh := s.fairShardOf(tc, key)
	w := jobstore.FairWaitCall{Shard: sh, Key: key, Data: encodeFairDelivery(d), Weight: tc.Fair.weightOf(key), Policy: s.fairPolicy(tc, sh)}
	state, existing, admitted, ok, err := s.store.CreateAndWait(ctx, keys, j, w)
	state, existing, err = createAnswer(j.ID, state, existing, err)
	if err != nil || state != jobstore.Created {
		// The job goes no further, yet its create may have run: a reply lost (the caller's deadline,
		// a cut connection), or one the client's retry of the whole pipeline answered Exists (a
		// generated id meets only its own create). Its record goes now, unconfirmed, so an entry
		// its wait left is freed at its admission's start, not after the claim runs out. What a
		// wait whose reply came admitted is delivered; one whose reply was lost is the sweep's.
		s.abandon(ctx, keys, j.ID)
		if ok {
			s.deliverAdmittedAtOnce(ctx, tc, admitted)
		}
		return state, existing, nil, err
	}
	if !ok {
		return state, existing, nil, nil // created, not waited: the enqueue waits on its own
	}
	return state, existing, &fairWaited{admitted: admitted}, nil
}
