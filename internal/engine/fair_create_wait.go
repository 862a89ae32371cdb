package engine

import (
	"context"
	"errors"
	"slices"

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
	confirm := s.confirmWithCreate(ctx, j.ID, spec)
	cw, err := s.store.CreateAndWait(ctx, keys, j, w, confirm)
	if cw.Waited && confirmedWithCreate(cw.Confirmed) {
		// The job stands, confirmed: a create answered Exists (a client's retry of the pipeline
		// after a lost reply) had run first, and a generated id meets only its own create.
		return jobstore.Created, "", &fairWaited{admitted: cw.Admitted, confirmed: true}, nil
	}
	state, existing, err := createAnswer(j.ID, cw.State, cw.Existing, err)
	if err != nil || state != jobstore.Created {
		// The job goes no further, yet its create may have run: a reply lost (the caller's deadline,
		// a cut connection), or one the client's retry of the whole pipeline answered Exists (a
		// generated id meets only its own create). Its record goes now, unconfirmed, so an entry
		// its wait left is freed at its admission's start, not after the claim runs out. What a
		// wait whose reply came admitted is delivered; one whose reply was lost is the sweep's.
		var admitted []jobstore.FairEntry
		if cw.Waited {
			admitted = cw.Admitted
		}
		if confirm == nil {
			s.abandon(ctx, keys, j.ID)
			s.deliverAdmittedAtOnce(ctx, tc, admitted)
			return state, existing, nil, err
		}
		if s.abandonUnlessConfirmed(ctx, keys, j.ID) {
			// An earlier send of the pipeline confirmed the job (the client sent it again after a
			// lost reply, and the second confirmation found the deadline past): it stands, and its
			// confirmation found it waiting.
			return jobstore.Created, "", &fairWaited{admitted: admitted, confirmed: true}, nil
		}
		s.deliverAdmittedAtOnce(ctx, tc, admitted)
		if cerr := confirmUnanswered(cw.Confirmed); cerr != nil {
			// The reply was lost and the record could not be read: the confirmation may still
			// take. Which it was is settled as for any confirmation unanswered.
			return "", "", nil, &unknownOutcome{res: Enqueued{JobID: j.ID, Waiting: true}, err: cerr}
		}
		return state, existing, nil, err
	}
	if !cw.Waited {
		return state, existing, nil, nil // created, not waited: the enqueue waits and confirms on its own
	}
	// Waited, not confirmed (the confirmation was not sent, or ran before the create or the wait:
	// they met NOSCRIPT and were sent again after it): the enqueue confirms on its own.
	return state, existing, &fairWaited{admitted: cw.Admitted}, nil
}

// confirmWithCreate is the confirmation of job id to send with its create and wait (nil: none,
// confirmsWithCreate). What it carries after it is fixed now: the batch that sends it may send it
// again (NOSCRIPT) after the caller has given up and gone on with spec's slices.
func (s *Stack) confirmWithCreate(ctx context.Context, id string, spec Spec) *jobstore.ConfirmWith {
	if !s.confirmsWithCreate(spec) {
		return nil
	}
	tenant, tags, now := spec.Tenant, slices.Clone(spec.Tags), s.now()
	due := s.store.ExpiryDue(now, spec.StartBy)
	return &jobstore.ConfirmWith{Deadline: s.store.WriteDeadline(ctx), Also: func(ctx context.Context, pipe redis.Pipeliner) {
		s.store.QueueIndex(ctx, pipe, tenant, id, tags, now)
		s.store.QueueExpiry(ctx, pipe, id, due)
	}}
}

// abandonUnlessConfirmed is abandon, telling whether the record stands confirmed (false also when
// Redis did not answer).
func (s *Stack) abandonUnlessConfirmed(ctx context.Context, keys jobstore.Keys, id string) bool {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonWait)
	defer cancel()
	removed, err := s.store.AbandonUnconfirmed(cctx, keys, id)
	return err == nil && !removed
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
// that could not be loaded, an error of the script) says it did not run; so does a call its batch
// never sent (jobstore.ErrNotSent).
func confirmUnanswered(c *jobstore.Confirmation) error {
	if c == nil {
		return nil
	}
	_, err := c.Result()
	var reply redis.Error
	if err == nil || errors.As(err, &reply) || errors.Is(err, jobstore.ErrNotSent) {
		return nil
	}
	return err
}
