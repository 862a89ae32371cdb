package engine

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// A fair job's wait rides in its create's round trip where nothing can refuse the job after the
// create has run: on one Redis node (a pipeline runs in order there; on a cluster the two would
// reach different masters in no order), without a caller's gate (Spec.Alongside: a request it
// refuses would leave an entry for a job that is not, and a refused flood as many), without a dedup
// (a duplicate's create answers another job) and with an id of the stack's own (a caller's may name
// a job that exists). Its confirmation rides there too, after the wait, unless confirmsWithCreate
// says otherwise: no asynq enqueue comes between the two for a job that waits. The enqueue then
// costs one round trip (shared with concurrent enqueues: the creates' batcher) and the delivery
// of what the wait admitted; a job without fair dispatch costs create, asynq's enqueue and confirm.

// fairWaited is a new job's wait sent with its create: what it admitted, to deliver once the job is
// confirmed, and whether the confirmation sent with them took (confirmsWithCreate).
type fairWaited struct {
	admitted  []jobstore.FairEntry
	confirmed bool
}

// waitsWithCreate says whether a new job of tc from spec waits in its create's round trip.
func (s *Stack) waitsWithCreate(tc TaskConfig, spec Spec, dedup string) bool {
	if tc.Fair == nil || spec.Alongside != nil || dedup != "" || spec.JobID != "" {
		return false
	}
	_, cluster := s.rdb.(*redis.ClusterClient)
	return !cluster
}

// confirmsWithCreate says whether a job that waits with its create (waitsWithCreate) is confirmed
// in the same round trip: nothing comes between the two (its asynq enqueue is its admission's),
// unless durable mode must WAIT for the confirmation (its own pipeline ends so) or the caller's
// Finally must see it (Spec.Finally is called with a pipeline of the caller's round trip, which a
// batch shared with other enqueues is not).
func (s *Stack) confirmsWithCreate(spec Spec) bool {
	return spec.Finally == nil && !s.store.Durability().On()
}

// createWaiting creates job j of tc with its wait in the same pipeline, and its confirmation
// after them where confirmsWithCreate allows. waited is nil when the wait did not run (the create
// did not run before it, or refused): the enqueue then waits on its own if the job was created.
func (s *Stack) createWaiting(ctx context.Context, keys jobstore.Keys, j jobstore.NewJob, tc TaskConfig, dedup string, spec Spec) (jobstore.CreateState, string, *fairWaited, error) {
	s.pumpParked(tc)
	if err := s.useFairLayout(ctx, tc); err != nil {
		return "", "", nil, err
	}
	key, d := s.firstFairDelivery(tc, dedup, spec, "")
	sh := s.fairShardOf(tc, key)
	w := jobstore.FairWaitCall{Shard: sh, Key: key, Data: encodeFairDelivery(d), Weight: tc.Fair.weightOf(key), Policy: s.fairPolicy(tc, sh)}
	var confirm *jobstore.ConfirmWith
	if s.confirmsWithCreate(spec) {
		confirm = &jobstore.ConfirmWith{Deadline: s.store.WriteDeadline(ctx), Also: func(ctx context.Context, pipe redis.Pipeliner) {
			s.indexConfirmed(ctx, pipe, j.ID, spec)
		}}
	}
	cw, err := s.store.CreateAndWait(ctx, keys, j, w, confirm)
	if cw.Waited && confirmedWithCreate(cw.Confirmed) {
		// The job stands, confirmed: a create answered Exists (a client's retry of the pipeline
		// after a lost reply) had run first, and a generated id meets only its own create.
		return jobstore.Created, "", &fairWaited{admitted: cw.Admitted, confirmed: true}, nil
	}
	if cerr := confirmUnanswered(cw.Confirmed); cerr != nil {
		// The pipeline's reply was lost: the confirmation may have taken. A record it did not
		// confirm goes; which it was is settled as for any confirmation unanswered.
		s.abandon(ctx, keys, j.ID)
		if cw.Waited {
			s.deliverAdmittedAtOnce(ctx, tc, cw.Admitted)
		}
		return "", "", nil, &unknownOutcome{res: Enqueued{JobID: j.ID, Waiting: true}, err: cerr}
	}
	state, existing, err := createAnswer(j.ID, cw.State, cw.Existing, err)
	if err != nil || state != jobstore.Created {
		// The job goes no further, yet its create may have run: a reply lost (the caller's deadline,
		// a cut connection), or one the client's retry of the whole pipeline answered Exists (a
		// generated id meets only its own create). Its record goes now, unconfirmed, so an entry
		// its wait left is freed at its admission's start, not after the claim runs out. What a
		// wait whose reply came admitted is delivered; one whose reply was lost is the sweep's.
		s.abandon(ctx, keys, j.ID)
		if cw.Waited {
			s.deliverAdmittedAtOnce(ctx, tc, cw.Admitted)
		}
		return state, existing, nil, err
	}
	if !cw.Waited {
		return state, existing, nil, nil // created, not waited: the enqueue waits and confirms on its own
	}
	// Waited, not confirmed (the confirmation was not sent, or found no record: sent again after
	// the create, it ran before it): the enqueue confirms on its own (confirming twice is harmless).
	return state, existing, &fairWaited{admitted: cw.Admitted}, nil
}

// confirmedWithCreate says whether the confirmation sent with a create (nil: none) took.
func confirmedWithCreate(c *jobstore.Confirmation) bool {
	if c == nil {
		return false
	}
	st, err := c.Result()
	return err == nil && st == jobstore.Confirmed
}

// confirmUnanswered is the error of a confirmation sent with a create whose answer was lost (it
// may have run), nil when it was answered (or none was sent). A reply of Redis's own (NOSCRIPT
// that could not be loaded, an error of the script) says it did not run.
func confirmUnanswered(c *jobstore.Confirmation) error {
	if c == nil {
		return nil
	}
	_, err := c.Result()
	var reply redis.Error
	if err == nil || errors.As(err, &reply) {
		return nil
	}
	return err
}
