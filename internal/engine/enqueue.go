package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/locking"
)

// asynqRetryAllowance is the retry count every delivery is enqueued with: more than asynq will
// ever reach, because jobguard counts attempts itself (asynq archives on its own count before it
// asks IsFailure, and would count bounces).
const asynqRetryAllowance = 1 << 20

// ErrJobExists: a job with this id exists already.
var ErrJobExists = errors.New("engine: job exists")

// ErrDedupPending: the request is a duplicate of a job whose first delivery has been waiting for
// asynq's answer longer than pendingWait (its enqueuer is slow or died); ask again later, when
// that job is confirmed or its claim has expired.
var ErrDedupPending = errors.New("engine: duplicate of a job not yet confirmed")

// ErrNotAccepted: the request's deadline passed before the job was confirmed; nothing was kept
// (what a stalled Redis runs later writes nothing).
var ErrNotAccepted = errors.New("engine: job not accepted before the deadline")

// ErrInvalidSpec: the spec can never be enqueued as it is (a key that is not valid, a dedup
// policy without a resource).
var ErrInvalidSpec = errors.New("engine: invalid job spec")

// ErrStartBy: the spec's start_by (or the type's StartWithin) is not after the first delivery's
// start, so the job could never start in time; it wraps ErrInvalidSpec.
var ErrStartBy = fmt.Errorf("%w: start_by is not after the first delivery's start", ErrInvalidSpec)

// ErrBadTags: the spec's tags break the rules (NormalizeTags); Enqueue's error wraps it and
// ErrInvalidSpec.
var ErrBadTags = jobstore.ErrBadTags

// NormalizeTags checks a job's tags and folds their duplicates (nil for none); its error wraps
// jobstore.ErrBadTags and says what is wrong.
func NormalizeTags(tags []string) ([]string, error) { return jobstore.NormalizeTags(tags) }

// ErrOutcomeUnknown: the confirmation was sent but its answer did not arrive (Redis stalled or the
// connection broke): the job may stand. A retry with the same Idempotency-Key, or of a request
// with a dedup policy, finds it if it does.
var ErrOutcomeUnknown = errors.New("engine: the enqueue's outcome is unknown")

// pendingWait is how long a duplicate waits for the job it collapses onto to be confirmed; an
// enqueue normally takes a round trip.
const pendingWait = 2 * time.Second

// Spec describes a new job.
type Spec struct {
	Type string
	// Tenant is recorded for views and authorization.
	Tenant string
	// Resource is what the job's lease protects; jobs of one resource never run at once, and their
	// keys share a slot. Empty: the job is its own resource.
	Resource string
	Payload  []byte
	// OpKey turns on execution idempotency: a job whose operation was applied is done at once.
	OpKey string
	// Dedup collapses duplicate requests (nil: every request is a new job). Needs a Resource.
	Dedup *Dedup
	// JobID is the id to use (from NewJobID for Resource); empty: a fresh one.
	JobID string
	// Headers travel with every delivery (e.g. the trace context).
	Headers map[string]string
	// ProcessIn delays the first delivery.
	ProcessIn time.Duration
	// StartBy is the job's deadline: a job that has not started by then (retries included: every
	// start is checked) ends expired instead of running late. Zero: the type's StartWithin from
	// now, if it has one. It must be later than the first delivery's start.
	StartBy time.Time
	// Tags label the job for lists and searches: at most 8, each 1-64 characters of
	// A-Z a-z 0-9 . _ : = - (ErrBadTags otherwise); duplicates are folded.
	Tags []string
	// Finally adds commands to send once the request's outcome is known, in the same round trip
	// as the dedup marker's confirmation (a new job) or the duplicate's timeline event (one per
	// node on a cluster); e.g. storing an HTTP idempotency answer. Their errors are the caller's
	// to read from the commands.
	Finally func(ctx context.Context, pipe redis.Pipeliner, res Enqueued)
	// Alongside queues the caller's commands in the first create's pipeline (one round trip; one
	// per node on a cluster), e.g. a rate limit and an Idempotency-Key claim, and returns gate,
	// which reads their answers once the pipeline ran. The create runs whatever they find, so
	// nothing acts on its answer before gate returned nil; a gate error abandons a job the
	// create made and is Enqueue's error, as it is. Alongside is called at most once, and gate
	// (nil: pass) exactly once after it; neither is when Enqueue fails before its create (a spec
	// it refuses). See gate.go.
	Alongside func(ctx context.Context, pipe redis.Pipeliner) (gate func() error)
}

// Enqueued is what Enqueue did.
type Enqueued struct {
	JobID string
	// Deduplicated: an existing job covers the request (its id is JobID); with policy Replace its
	// payload was replaced.
	Deduplicated bool
	// Waiting: the new job is of a fairly dispatched type and waits in the admission layer for
	// its key's turn (its status is waiting until its admitted delivery starts), not in asynq.
	Waiting bool
	// Decision is set for Spec.Finally when it runs in the round trip of the new job's
	// confirmation on one Redis node (not on a cluster, not for a duplicate): the key of the job's
	// record, whose field "confirmed" the confirmation just before the caller's commands sets from
	// "0" to "1". A command that checks it there is stored if and only if the job was confirmed,
	// whatever the time: two commands that each checked the request's deadline could be split
	// by it (a Redis stalled between them), leaving a job without its answer.
	Decision string
}

// Enqueue creates the job record, then its first delivery, then confirms the record. Until the
// confirmation the record is a claim that lives until ctx's deadline plus a second (30 s without
// a deadline) and that no delivery runs; every write carries ctx's deadline and does nothing past
// it. So a request that fails or gives up (ErrNotAccepted, or any error) leaves no job behind,
// however late a stalled Redis runs what it sent, and no job is left queued without a delivery.
// Round trips: create (with the caller's Alongside commands), enqueue, confirm (with the
// caller's Finally commands); a deduplicated request costs create plus one to note it on the
// existing job's timeline. A duplicate of a job
// whose enqueue is still in flight waits for it (polling create, up to pendingWait, then
// ErrDedupPending), so it is never answered with a job that is then abandoned.
func (s *Stack) Enqueue(ctx context.Context, client *asynq.Client, spec Spec) (Enqueued, error) {
	tc, ok := s.TaskConfig(spec.Type)
	if !ok {
		return Enqueued{}, fmt.Errorf("%w: %q", ErrUnknownType, spec.Type)
	}
	dedup, err := checkSpec(spec)
	if err != nil {
		return Enqueued{}, err
	}
	if spec.Tags, err = jobstore.NormalizeTags(spec.Tags); err != nil {
		return Enqueued{}, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	now := s.now()
	if spec.StartBy, err = deadlineOf(tc, spec, now); err != nil {
		return Enqueued{}, err
	}
	id := s.jobIDFor(spec, now)
	keys, err := s.keysFor(id, spec.OpKey, dedup)
	if err != nil {
		return Enqueued{}, err
	}
	// The record keeps the payload sealed (an encrypted type); the limit key and the replace
	// below see the spec's plaintext.
	stored := spec
	if stored.Payload, err = s.sealValue(tc, id, jobstore.FieldPayload, spec.Payload); err != nil {
		return Enqueued{}, err
	}
	var waited *fairWaited // a fair job's wait sent with its create (createWaiting)
	for try := 0; ; try++ {
		j := s.newRecord(ctx, id, tc, stored, dedup, now)
		// A fair type's job waits for its key's admission.
		waitsForKey(&j, tc, spec)
		var state jobstore.CreateState
		var existing string
		if try == 0 && spec.Alongside != nil {
			state, existing, err = s.createGated(ctx, keys, j, spec.Alongside)
		} else if try == 0 && s.waitsWithCreate(tc, spec, dedup) {
			state, existing, waited, err = s.createWaiting(ctx, keys, j, tc, dedup, spec)
		} else {
			state, existing, err = s.create(ctx, keys, j)
		}
		if err != nil {
			return Enqueued{}, err
		}
		if state == jobstore.PendingExisting {
			// The marker's job may still be abandoned if asynq refuses it: wait for its answer
			// rather than hand out a job that might never exist.
			if state, err = s.awaitConfirmation(ctx, keys, spec.Dedup.Policy, existing); err != nil {
				return Enqueued{}, err
			}
			if state == jobstore.Created {
				continue // abandoned: this request may create the job
			}
		}
		switch state {
		case jobstore.Exists:
			return Enqueued{}, fmt.Errorf("%w: %s", ErrJobExists, id)
		case jobstore.Duplicate:
			s.Stats.Deduplicated.Add(1)
			s.m.dedup.WithLabelValues(spec.Type, string(spec.Dedup.Policy), "deduplicated").Inc()
			e := Enqueued{JobID: existing, Deduplicated: true}
			if err := s.noteDuplicate(ctx, keysOr(s, existing), e, spec); err != nil {
				return Enqueued{}, err
			}
			return e, nil
		case jobstore.ReplaceExisting:
			replaced, err := s.replace(ctx, existing, tc, spec)
			if err != nil {
				return Enqueued{}, err
			}
			if replaced || try > 0 {
				s.Stats.Replaced.Add(1)
				s.m.dedup.WithLabelValues(spec.Type, string(spec.Dedup.Policy), "replaced").Inc()
				e := Enqueued{JobID: existing, Deduplicated: true}
				s.finally(ctx, s.rdb.Pipeline(), spec, e)
				return e, nil
			}
			continue // the job started in between: its marker is gone, create anew
		}
		break
	}
	if tc.Fair != nil {
		return s.enqueueFair(ctx, client, tc, keys, id, dedup, spec, waited)
	}
	if err := s.deliver(ctx, client, tc, id, DeliveryID(id, 1), spec.OpKey, dedup, limitHeaders(tc, spec), firstDelay(spec)); err != nil {
		s.abandon(ctx, keys, id)
		return Enqueued{}, err
	}
	if err := s.confirm(ctx, keys, Enqueued{JobID: id}, s.queueOf(tc.Queue, id), spec); err != nil {
		s.abandon(ctx, keys, id) // removes nothing the confirmation confirmed
		return Enqueued{}, err
	}
	return Enqueued{JobID: id}, nil
}

// enqueueFair is the end of Enqueue for a fairly dispatched type: the job waits in its key's list
// instead of asynq's queue, then is confirmed with a waiting event, then what the wait admitted
// (this job, when its key's turn and the capacity allow, or others) is delivered into asynq. A job
// abandoned after its wait is gone at its delivery's start, and frees its admission then.
// waited is the wait sent with the create (nil: none, or it did not run): the job waits already.
func (s *Stack) enqueueFair(ctx context.Context, client *asynq.Client, tc TaskConfig, keys jobstore.Keys, id, dedup string, spec Spec, waited *fairWaited) (Enqueued, error) {
	var admitted []jobstore.FairEntry
	if waited != nil {
		admitted = waited.admitted
	} else {
		var err error
		if admitted, err = s.fairWait(ctx, tc, id, dedup, spec, ""); err != nil {
			s.abandon(ctx, keys, id)
			return Enqueued{}, err
		}
	}
	defer s.deliverAdmitted(ctx, client, tc, admitted)
	// The record stands for the waiting event (waitsForKey).
	res := Enqueued{JobID: id, Waiting: true}
	if waited != nil && waited.confirmed {
		return res, nil
	}
	if err := s.confirm(ctx, keys, res, s.queueOf(tc.Queue, id), spec); err != nil {
		s.abandon(ctx, keys, id)
		return Enqueued{}, err
	}
	return res, nil
}

// checkSpec validates a spec's keys and returns its dedup ("<policy>:<key>", "" none).
func checkSpec(spec Spec) (string, error) {
	if spec.OpKey != "" {
		if err := locking.ValidateResource(spec.OpKey); err != nil {
			return "", fmt.Errorf("%w: operation key: %w", ErrInvalidSpec, err)
		}
	}
	d := spec.Dedup
	if d == nil {
		return "", nil
	}
	if !d.Policy.valid() || spec.Resource == "" {
		return "", fmt.Errorf("%w: dedup policy %q needs a known policy and a resource", ErrInvalidSpec, d.Policy)
	}
	if err := locking.ValidateResource(d.Key); err != nil {
		return "", fmt.Errorf("%w: dedup key: %w", ErrInvalidSpec, err)
	}
	return string(d.Policy) + ":" + d.Key, nil
}

// deadlineOf is the job's start_by (zero none): the spec's, else the type's StartWithin from now.
// One that the first delivery cannot meet is ErrInvalidSpec.
func deadlineOf(tc TaskConfig, spec Spec, now time.Time) (time.Time, error) {
	startBy := spec.StartBy
	if startBy.IsZero() && tc.StartWithin > 0 {
		startBy = now.Add(tc.StartWithin)
	}
	if !startBy.IsZero() && !startBy.After(now.Add(firstDelay(spec))) {
		return time.Time{}, fmt.Errorf("%w (start_by %s)", ErrStartBy, startBy.UTC().Format(time.RFC3339Nano))
	}
	return startBy, nil
}

// keysOr are the keys of job id, or zero keys when the id is malformed (never for ids the store
// handed out).
func keysOr(s *Stack, id string) jobstore.Keys {
	k, _ := s.store.Keys(id, "")
	return k
}

// abandonWait bounds the clean-up of a job that was not accepted: the claim runs out on its own,
// so the answer to the caller is not held back for it.
const abandonWait = 500 * time.Millisecond

// abandon removes the record, timeline and dedup marker of a job that was not accepted, so a
// retry finds the key free at once rather than when the claim runs out.
func (s *Stack) abandon(ctx context.Context, keys jobstore.Keys, id string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonWait)
	defer cancel()
	_ = s.store.Abandon(cctx, keys, id)
}

// confirm makes job res.JobID's record permanent (for its retention), its dedup marker last its TTL,
// puts it in the tenant's list and the expiry index, and sends the caller's Finally commands, in
// one pipeline. In durable mode a WAIT ends it (one per node on a cluster, the queue's master
// included): a confirmation the replicas did not acknowledge is a notDurable error, and the job
// stands on the master.
func (s *Stack) confirm(ctx context.Context, keys jobstore.Keys, res Enqueued, queue string, spec Spec) error {
	id := res.JobID
	ttl := time.Duration(0)
	if d := spec.Dedup; d != nil && d.Policy != Throttle {
		ttl = dedupTTL(d) // a throttle's window runs from the create
	}
	// One node runs a pipeline in order: a Finally command that checks the same deadline runs
	// only if the confirmation could. A cluster sends each node its part at once, so there the
	// caller's commands wait for the confirmation's answer (one more round trip).
	_, cluster := s.rdb.(*redis.ClusterClient)
	durable := s.store.Durability()
	var c jobstore.Confirmation
	// The confirm goes as EVALSHA (its text, 1.4 KB with the prelude functions it uses, is not
	// sent and hashed with each enqueue) unless something in its pipeline must run only if it did: the caller's Finally
	// commands, durable mode's WAIT. There a NOSCRIPT retry alone would come after them, so the
	// confirm goes as EVAL, which never meets NOSCRIPT.
	queueConfirm := s.store.QueueConfirmSha
	if spec.Finally != nil || durable.On() {
		queueConfirm = s.store.QueueConfirm
	}
	werr := durable.Exec(ctx, s.rdb, func(pipe redis.Pipeliner) {
		c = queueConfirm(ctx, pipe, keys, id, ttl, s.store.WriteDeadline(ctx))
		s.indexConfirmed(ctx, pipe, id, spec)
		if !cluster && spec.Finally != nil {
			decided := res
			decided.Decision = keys.Record
			spec.Finally(ctx, pipe, decided)
		}
		if cluster && durable.On() {
			// asynq's enqueue of the delivery wrote in the queue's slot, on a master of its own
			// on a cluster: a write of ours in that slot puts a WAIT on that master's connection
			// too, and its replicas' acknowledgement covers the delivery written before it.
			pipe.Set(ctx, s.store.Key(queue, "durable"), id, time.Minute)
		}
	})
	state, err := c.Result()
	switch {
	case err != nil:
		return &unknownOutcome{res: res, err: err}
	case state != jobstore.Confirmed:
		return fmt.Errorf("%w: job %s was %s at its confirmation", ErrNotAccepted, id, state)
	}
	if cluster && spec.Finally != nil {
		if ferr := durable.Exec(ctx, s.rdb, func(pipe redis.Pipeliner) { spec.Finally(ctx, pipe, res) }); werr == nil {
			werr = ferr
		}
	}
	if werr != nil {
		return &notDurable{err: fmt.Errorf("job %s: %w", id, werr)}
	}
	return nil
}

// indexConfirmed queues, after job id's confirmation, its place in the tenant's list (GET /jobs)
// and its tags', and in the expiry index.
func (s *Stack) indexConfirmed(ctx context.Context, pipe redis.Pipeliner, id string, spec Spec) {
	now := s.now()
	s.store.QueueIndex(ctx, pipe, spec.Tenant, id, spec.Tags, now)
	s.store.QueueExpiry(ctx, pipe, id, s.store.ExpiryDue(now, spec.StartBy))
}

// finally adds the caller's Finally commands to pipe and sends it, if it holds anything.
func (s *Stack) finally(ctx context.Context, pipe redis.Pipeliner, spec Spec, res Enqueued) {
	if spec.Finally != nil {
		spec.Finally(ctx, pipe, res)
	}
	if pipe.Len() > 0 {
		_, _ = pipe.Exec(ctx)
	}
}

// awaitConfirmation polls until the job a marker named while its enqueue was in flight is
// confirmed (then it covers the request: Duplicate, or ReplaceExisting under that policy) or
// abandoned (Created: the request may create the job). Past pendingWait, or when that job's
// enqueuer died before confirming it, the answer is ErrDedupPending.
func (s *Stack) awaitConfirmation(ctx context.Context, keys jobstore.Keys, policy Policy, existing string) (jobstore.CreateState, error) {
	deadline, pause := s.now().Add(pendingWait), time.Millisecond
	for {
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return "", context.Cause(ctx)
		}
		pause = min(2*pause, 50*time.Millisecond)
		state, err := s.store.Pending(ctx, keys, existing)
		switch {
		case err != nil:
			return "", fmt.Errorf("engine: %w", err)
		case state == jobstore.PendingConfirmed && policy == Replace:
			return jobstore.ReplaceExisting, nil
		case state == jobstore.PendingConfirmed:
			return jobstore.Duplicate, nil
		case state == jobstore.PendingGone:
			return jobstore.Created, nil
		case state == jobstore.PendingUnconfirmed || s.now().After(deadline):
			return "", fmt.Errorf("%w: job %s", ErrDedupPending, existing)
		}
	}
}

func firstDelay(spec Spec) time.Duration {
	if d := spec.Dedup; d != nil && d.Policy == Replace && d.Debounce > spec.ProcessIn {
		return d.Debounce
	}
	return spec.ProcessIn
}

func dedupTTL(d *Dedup) time.Duration {
	if d.TTL > 0 {
		return d.TTL
	}
	return 24 * time.Hour
}

// newRecord is what the create of job id writes.
func (s *Stack) newRecord(ctx context.Context, id string, tc TaskConfig, spec Spec, dedup string, now time.Time) jobstore.NewJob {
	claim := jobstore.ClaimTTL(ctx, claimTTL)
	j := jobstore.NewJob{
		ID: id, Type: spec.Type, Queue: s.queueOf(tc.Queue, id), Tenant: spec.Tenant, Resource: spec.Resource, MaxAttempts: tc.MaxAttempts,
		Payload: spec.Payload, OpKey: spec.OpKey, Dedup: dedup, Now: now, StartBy: spec.StartBy, Tags: spec.Tags,
		Deadline: s.store.WriteDeadline(ctx), ClaimTTL: claim, MarkerTTL: claim,
	}
	if d := spec.Dedup; d != nil {
		j.Policy = string(d.Policy)
		if d.Policy == Throttle {
			j.MarkerTTL = dedupTTL(d)
		}
		if d.Policy == Replace && d.Debounce > 0 {
			j.NotBefore = now.Add(d.Debounce)
		}
	}
	return j
}

func (s *Stack) create(ctx context.Context, keys jobstore.Keys, j jobstore.NewJob) (jobstore.CreateState, string, error) {
	state, existing, err := s.store.Create(ctx, keys, j)
	return createAnswer(j.ID, state, existing, err)
}

// createAnswer turns the store's create answer into Enqueue's: an error, or a state that does
// not say the request came too late.
func createAnswer(id string, state jobstore.CreateState, existing string, err error) (jobstore.CreateState, string, error) {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		// The caller gave up before the create answered (in a batch, maybe before it was sent):
		// whatever it wrote stays unconfirmed and expires, so the job is not accepted.
		return "", "", fmt.Errorf("%w: job %s: %w", ErrNotAccepted, id, err)
	}
	if err != nil {
		return "", "", fmt.Errorf("engine: %w", err)
	}
	if state == jobstore.Expired {
		return "", "", fmt.Errorf("%w: job %s reached Redis after the deadline", ErrNotAccepted, id)
	}
	return state, existing, nil
}

// noteDuplicate puts a deduplicated request on the existing job's timeline, in one round trip
// with the caller's Finally commands.
func (s *Stack) noteDuplicate(ctx context.Context, keys jobstore.Keys, res Enqueued, spec Spec) error {
	// In durable mode the answer waits for the replicas too: the existing job may be one whose own
	// enqueue was answered not_durable and that stands on the master only (a retry of it got 202
	// for a job no replica held). The event is a write in the job's slot, so the WAIT after it
	// covers the job's record on that master.
	durable := s.store.Durability()
	werr := durable.Exec(ctx, s.rdb, func(pipe redis.Pipeliner) {
		if keys.Record != "" {
			s.store.QueueEvents(ctx, pipe, keys, s.now(), Event{Event: "deduplicated", Detail: string(spec.Dedup.Policy) + " " + spec.Dedup.Key})
		}
		if durable.On() {
			// The job's own confirmation may have reached no replica, its index entry included
			// (a cluster pipeline's group sent to a demoted master is refused): the reconciler,
			// which redelivers a queued job whose delivery a failover lost, finds jobs there.
			s.store.QueueIndex(ctx, pipe, spec.Tenant, res.JobID, spec.Tags, s.now())
		}
		if spec.Finally != nil {
			spec.Finally(ctx, pipe, res)
		}
	})
	if werr != nil {
		return &notDurable{err: fmt.Errorf("job %s (duplicate): %w", res.JobID, werr)}
	}
	return nil
}

func (s *Stack) replace(ctx context.Context, existing string, tc TaskConfig, spec Spec) (bool, error) {
	now := s.now()
	var notBefore time.Time
	if spec.Dedup.Debounce > 0 {
		notBefore = now.Add(spec.Dedup.Debounce)
	}
	payload, err := s.sealValue(tc, existing, jobstore.FieldPayload, spec.Payload) // bound to the job it goes into
	if err != nil {
		return false, err
	}
	ok, err := s.store.Replace(ctx, existing, payload, notBefore, now, "replace "+spec.Dedup.Key)
	if err != nil {
		return false, fmt.Errorf("engine: %w", err)
	}
	return ok, nil
}
