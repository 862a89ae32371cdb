package jobstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// NewJob is what Create writes for a job that does not exist yet.
type NewJob struct {
	ID, Type, Queue, Tenant, Resource string
	MaxAttempts                       int
	Payload                           []byte
	OpKey                             string
	// Dedup is "<policy>:<key>" ("" none); Policy its policy, for the marker.
	Dedup, Policy string
	// NotBefore is the earliest start (a debounce); zero none.
	NotBefore time.Time
	// StartBy is the job's deadline: not started by then, it expires; zero none.
	StartBy time.Time
	// Tags are the job's tags, normalized (NormalizeTags); nil none.
	Tags []string
	Now  time.Time
	// Deadline is WriteDeadline of the request (0 none); ClaimTTL how long the record lives
	// unconfirmed; MarkerTTL how long a new marker lives before its confirmation (the window for
	// throttle).
	Deadline            int64
	ClaimTTL, MarkerTTL time.Duration
	// Held makes the job a workflow node waiting for its parents (StatusHeld, no delivery until
	// its release); Workflow is "<workflow id>:<node id>" for a node ("" none).
	Held     bool
	Workflow string
	// Waiting makes the job wait for its key's admission (StatusWaiting, no delivery until it is
	// admitted: engine/fair.go) on FairKey, which the record keeps: it stands for the job's
	// waiting event (fold.go).
	Waiting bool
	FairKey string
}

// CreateState is what Create found.
type CreateState string

// The states of Create.
const (
	Created CreateState = "created"
	// Duplicate: a marker names a confirmed job that covers the request (Existing).
	Duplicate CreateState = "dup"
	// ReplaceExisting: policy replace, the caller replaces Existing's payload.
	ReplaceExisting CreateState = "replace"
	// PendingExisting: the marker's job is not confirmed yet; ask again.
	PendingExisting CreateState = "pending"
	// Exists: the id is taken; nothing written.
	Exists CreateState = "exists"
	// Expired: the request's deadline passed before Redis ran the script; nothing written.
	Expired CreateState = "expired"
)

// Create writes a new job's record (unconfirmed, for ClaimTTL) and its first timeline event,
// unless a dedup marker names a job that covers it. One round trip, shared with concurrent
// creates (group commit: one pipeline carries the creates queued while the previous one was on
// the wire; a create alone goes at once).
func (s *Store) Create(ctx context.Context, k Keys, j NewJob) (CreateState, string, error) {
	keys, args := s.createCall(k, j)
	res, err := s.creates.run(ctx, []scriptCall{{createScript, func(ctx context.Context, c redis.Scripter) *redis.Cmd {
		return createScript.EvalSha(ctx, c, keys, args...)
	}}})[0].Result()
	return parseCreate(res, err)
}

// CreateWith is Create sent in one pipeline after the commands with queues (one round trip; one
// per node on a cluster), e.g. a caller's rate limit and Idempotency-Key claim. The create runs
// whatever those commands find: what it wrote is the caller's to keep or to Abandon once it has
// read their answers. A create that found its script missing (Redis restarted, failed over) did
// not run and is sent again alone; the caller's commands are theirs to read and retry.
func (s *Store) CreateWith(ctx context.Context, k Keys, j NewJob, with func(pipe redis.Pipeliner)) (CreateState, string, error) {
	keys, args := s.createCall(k, j)
	pipe := s.rdb.Pipeline()
	with(pipe)
	cmd := createScript.EvalSha(ctx, pipe, keys, args...)
	_, _ = pipe.Exec(ctx)
	res, err := cmd.Result()
	if isNoScript(err) {
		res, err = createScript.Eval(ctx, s.rdb, keys, args...).Result()
	}
	return parseCreate(res, err)
}

// Creation is a create queued in a pipeline (QueueCreate); Result reads it once the pipeline ran.
type Creation struct {
	cmd  *redis.Cmd
	keys []string
	args []any
}

// QueueCreate adds Create of j to pipe (EVALSHA: a create that finds its script missing is sent
// again alone by Result).
func (s *Store) QueueCreate(ctx context.Context, pipe redis.Pipeliner, k Keys, j NewJob) *Creation {
	keys, args := s.createCall(k, j)
	return &Creation{cmd: createScript.EvalSha(ctx, pipe, keys, args...), keys: keys, args: args}
}

// Result is the create's answer, as Create's; a create whose script was missing runs again.
func (c *Creation) Result(ctx context.Context, s *Store) (CreateState, string, error) {
	res, err := c.cmd.Result()
	if isNoScript(err) {
		res, err = createScript.Run(ctx, s.rdb, c.keys, c.args...).Result()
	}
	return parseCreate(res, err)
}

// createCall is the create script's keys and arguments for j.
func (s *Store) createCall(k Keys, j NewJob) ([]string, []any) {
	delivery := DeliveryID(j.ID, 1)
	notBefore, startBy := int64(0), int64(0)
	if !j.NotBefore.IsZero() {
		notBefore = j.NotBefore.UnixMilli()
	}
	if !j.StartBy.IsZero() {
		startBy = j.StartBy.UnixMilli()
	}
	now := j.Now.UnixMilli()
	status := StatusQueued
	if j.Held {
		status = StatusHeld
	}
	if j.Waiting {
		status = StatusWaiting
	}
	args := []any{
		j.Deadline, s.cfg.WorkerID, j.Policy, ms(j.MarkerTTL), j.ID, ms(j.ClaimTTL),
		FieldJobID, j.ID, FieldType, j.Type, FieldQueue, j.Queue,
		FieldStatus, string(status), FieldAttempt, 0, FieldMaxAttempts, j.MaxAttempts, FieldDeliveries, 1,
		FieldDelivery, delivery, FieldCreatedAt, now, FieldUpdatedAt, now, FieldPayload, string(j.Payload),
	}
	// Absent when none: a field that says none costs memory per job and a conversion in every
	// script that writes or reads it, and every reader takes an absent field for none. The end's
	// compaction (record_compact) then has no none to look for. The payload stays, empty or not:
	// a replay runs only a record that has one.
	for _, f := range []struct {
		name, value string
	}{
		{FieldOpKey, j.OpKey}, {FieldDedup, j.Dedup}, {FieldTenant, j.Tenant}, {FieldResource, j.Resource},
	} {
		if f.value != "" {
			args = append(args, f.name, f.value)
		}
	}
	if notBefore > 0 {
		args = append(args, FieldNotBefore, notBefore)
	}
	if startBy > 0 {
		args = append(args, FieldStartBy, startBy)
	}
	if len(j.Tags) > 0 {
		args = append(args, FieldTags, joinTags(j.Tags))
	}
	if j.Workflow != "" {
		args = append(args, FieldWorkflow, j.Workflow)
	}
	if j.Waiting {
		args = append(args, FieldFairKey, j.FairKey)
	}
	return []string{k.Record, k.Timeline, k.Marker, k.Pending}, args
}

// parseCreate reads the create script's reply (or the error of its round trip).
func parseCreate(res any, err error) (CreateState, string, error) {
	if err != nil {
		return "", "", fmt.Errorf("jobstore: create job: %w", err)
	}
	r, err := replyStrings("create", res, 1)
	if err != nil {
		return "", "", err
	}
	switch st := CreateState(r[0]); st {
	case Created, Exists, Expired:
		return st, "", nil
	case Duplicate, ReplaceExisting, PendingExisting:
		if len(r) < 2 {
			return "", "", replyError("create", res)
		}
		return st, r[1], nil
	}
	return "", "", replyError("create", res)
}

// ConfirmState is what a confirmation found.
type ConfirmState string

// The states of a confirmation.
const (
	Confirmed ConfirmState = "confirmed"
	// ConfirmExpired: past the deadline, nothing written; the claim runs out.
	ConfirmExpired ConfirmState = "expired"
	// ConfirmGone: the record is gone (its claim ran out).
	ConfirmGone ConfirmState = "gone"
	// ConfirmUnwaited: a fair job's confirmation sent with its create and wait found the job not
	// waiting yet (CreateAndWait); nothing written.
	ConfirmUnwaited ConfirmState = "unwaited"
)

// Confirmation is a confirmation queued in a pipeline; Result reads it once the pipeline ran.
type Confirmation struct {
	cmd *redis.Cmd
	// retry sends it again alone (QueueConfirmSha, whose EVALSHA may find the script missing).
	retry func() *redis.Cmd
}

// Result is the confirmation's state.
func (c Confirmation) Result() (ConfirmState, error) {
	res, err := c.cmd.Result()
	if isNoScript(err) && c.retry != nil {
		res, err = c.retry().Result()
	}
	if err != nil {
		return "", fmt.Errorf("jobstore: confirm job: %w", err)
	}
	st, ok := res.(string)
	switch ConfirmState(st) {
	case Confirmed, ConfirmExpired, ConfirmGone, ConfirmUnwaited:
		if ok {
			return ConfirmState(st), nil
		}
	}
	return "", replyError("confirm", res)
}

// QueueConfirm adds the confirmation of job id to pipe: the record is kept for its retention, the
// marker's pending flag goes, and the marker lasts markerTTL (0: as it is). Eval keeps the
// pipeline free of NOSCRIPT retries.
func (s *Store) QueueConfirm(ctx context.Context, pipe redis.Pipeliner, k Keys, id string, markerTTL time.Duration, deadline int64) Confirmation {
	return Confirmation{cmd: confirmScript.Eval(ctx, pipe, []string{k.Marker, k.Pending, k.Record, k.Timeline},
		id, ms(markerTTL), deadline, ms(s.cfg.Retention))}
}

// QueueConfirmSha is QueueConfirm sent as EVALSHA, for pipelines of many (a bulk's): the script's
// text is not sent with each; one whose script is missing is sent again alone by Result.
func (s *Store) QueueConfirmSha(ctx context.Context, pipe redis.Pipeliner, k Keys, id string, markerTTL time.Duration, deadline int64) Confirmation {
	keys := []string{k.Marker, k.Pending, k.Record, k.Timeline}
	args := []any{id, ms(markerTTL), deadline, ms(s.cfg.Retention)}
	return Confirmation{cmd: confirmScript.EvalSha(ctx, pipe, keys, args...),
		retry: func() *redis.Cmd { return confirmScript.Run(ctx, s.rdb, keys, args...) }}
}

// Abandon removes the record, timeline and dedup marker of job id, which asynq did not take.
func (s *Store) Abandon(ctx context.Context, k Keys, id string) error {
	_, err := s.AbandonUnconfirmed(ctx, k, id)
	return err
}

// AbandonUnconfirmed is Abandon, telling whether the record was removed (false: it is confirmed,
// and kept).
func (s *Store) AbandonUnconfirmed(ctx context.Context, k Keys, id string) (bool, error) {
	n, err := abandonScript.Run(ctx, s.rdb, []string{k.Record, k.Timeline, k.Marker, k.Pending}, id).Int()
	if err != nil {
		return false, fmt.Errorf("jobstore: abandon job %s: %w", id, err)
	}
	return n == 1, nil
}

// AbandonMany is Abandon for each of jobs ids (keys[i] being ids[i]'s), in one pipeline: a
// workflow's nodes. It returns the first error.
func (s *Store) AbandonMany(ctx context.Context, keys []Keys, ids []string) error {
	calls := make([]scriptCall, len(ids))
	for i, id := range ids {
		k := keys[i]
		// By SHA (its text with the prelude is about 10 KB: 10 MB for 1,000 nodes), loaded and
		// sent again if Redis lost it.
		calls[i] = scriptCall{script: abandonScript, eval: func(ctx context.Context, c redis.Scripter) *redis.Cmd {
			return abandonScript.EvalSha(ctx, c, []string{k.Record, k.Timeline, k.Marker, k.Pending}, id)
		}}
	}
	cmds, _ := runPipelined(ctx, s.rdb, Durability{}, calls)
	for i, c := range cmds {
		if err := c.Err(); err != nil {
			return fmt.Errorf("jobstore: abandon job %s: %w", ids[i], err)
		}
	}
	return nil
}

// PendingState is what became of a job a marker named while its enqueue was in flight.
type PendingState string

// The pending states.
const (
	StillPending PendingState = "pending"
	// PendingConfirmed: asynq took its first delivery.
	PendingConfirmed PendingState = "confirmed"
	// PendingGone: it was abandoned.
	PendingGone PendingState = "gone"
	// PendingUnconfirmed: its enqueuer died (the flag lapsed, the record is unconfirmed).
	PendingUnconfirmed PendingState = "unconfirmed"
)

// Pending tells whether existing, the job k's marker named, has been confirmed since.
func (s *Store) Pending(ctx context.Context, k Keys, existing string) (PendingState, error) {
	other, err := s.Keys(existing, "")
	if err != nil {
		return "", err
	}
	st, err := pendingScript.Run(ctx, s.rdb, []string{k.Pending, other.Record}, existing).Text()
	if err != nil {
		return "", fmt.Errorf("jobstore: dedup marker: %w", err)
	}
	switch p := PendingState(st); p {
	case StillPending, PendingConfirmed, PendingGone, PendingUnconfirmed:
		return p, nil
	}
	return "", replyError("pending", st)
}

// Replace makes payload the one job id runs with, if it still waits; notBefore (zero none) moves
// its start. It reports whether the job still waited.
func (s *Store) Replace(ctx context.Context, id string, payload []byte, notBefore, now time.Time, detail string) (bool, error) {
	k, err := s.Keys(id, "")
	if err != nil {
		return false, err
	}
	nb := int64(0)
	if !notBefore.IsZero() {
		nb = notBefore.UnixMilli()
	}
	ev := s.eventJSON(Event{Event: "replaced", Detail: detail}, now)
	n, err := replaceScript.Run(ctx, s.rdb, []string{k.Record, k.Timeline},
		string(payload), nb, ev, s.cfg.TimelineCap, ms(s.cfg.Retention)).Int()
	if err != nil {
		return false, fmt.Errorf("jobstore: replace payload of %s: %w", id, err)
	}
	return n == 1, nil
}

// Confirmed says whether the record of k is confirmed: it exists and its field confirmed is not
// "0" (create writes "0", the confirmation "1"; a final record's is derived, so absent).
func (s *Store) Confirmed(ctx context.Context, k Keys) (bool, error) {
	v, err := s.rdb.HMGet(ctx, k.Record, FieldStatus, FieldConfirmed).Result()
	if err != nil {
		return false, fmt.Errorf("jobstore: read job confirmation: %w", err)
	}
	return v[0] != nil && v[1] != "0", nil
}
