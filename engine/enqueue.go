package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

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
	// Finally adds commands to send once the request's outcome is known, in the same round trip
	// as the dedup marker's confirmation (a new job) or the duplicate's timeline event (one per
	// node on a cluster); e.g. storing an HTTP idempotency answer. Their errors are the caller's
	// to read from the commands.
	Finally func(ctx context.Context, pipe redis.Pipeliner, res Enqueued)
}

// Enqueued is what Enqueue did.
type Enqueued struct {
	JobID string
	// Deduplicated: an existing job covers the request (its id is JobID); with policy Replace its
	// payload was replaced.
	Deduplicated bool
}

// Enqueue creates the job record, then its first delivery, then confirms the record. Until the
// confirmation the record is a claim that lives until ctx's deadline plus a second (30 s without
// a deadline) and that no delivery runs; every write carries ctx's deadline and does nothing past
// it. So a request that fails or gives up (ErrNotAccepted, or any error) leaves no job behind,
// however late a stalled Redis runs what it sent, and no job is left queued without a delivery.
// Round trips: create, enqueue, confirm (with the caller's Finally commands); a deduplicated
// request costs create plus one to note it on the existing job's timeline. A duplicate of a job
// whose enqueue is still in flight waits for it (polling create, up to pendingWait, then
// ErrDedupPending), so it is never answered with a job that is then abandoned.
func (s *Stack) Enqueue(ctx context.Context, client *asynq.Client, spec Spec) (Enqueued, error) {
	tc, ok := s.TaskConfig(spec.Type)
	if !ok {
		return Enqueued{}, fmt.Errorf("%w: %q", ErrUnknownType, spec.Type)
	}
	if spec.OpKey != "" {
		if err := locking.ValidateResource(spec.OpKey); err != nil {
			return Enqueued{}, fmt.Errorf("engine: operation key: %w", err)
		}
	}
	dedup := ""
	if d := spec.Dedup; d != nil {
		if !d.Policy.valid() || spec.Resource == "" {
			return Enqueued{}, fmt.Errorf("engine: dedup policy %q needs a known policy and a resource", d.Policy)
		}
		if err := locking.ValidateResource(d.Key); err != nil {
			return Enqueued{}, fmt.Errorf("engine: dedup key: %w", err)
		}
		dedup = string(d.Policy) + ":" + d.Key
	}
	now := time.Now()
	id := spec.JobID
	if id == "" {
		resource := spec.Resource
		if resource == "" {
			resource = "job:" + strconv.FormatInt(now.UnixNano(), 36) + s.locks.NewOwner()
		}
		id = NewJobID(resource, now)
	}
	keys, err := s.keysFor(id, spec.OpKey)
	if err != nil {
		return Enqueued{}, err
	}
	keys = keys.withDedup(s, dedup)
	for try := 0; ; try++ {
		res, err := s.create(ctx, keys, id, tc, spec, dedup, now)
		if err != nil {
			return Enqueued{}, err
		}
		if res[0] == "pending" {
			// The marker's job may still be abandoned if asynq refuses it: wait for its answer
			// rather than hand out a job that might never exist.
			if res, err = s.awaitConfirmation(ctx, keys, spec.Dedup.Policy, res[1]); err != nil {
				return Enqueued{}, err
			}
			if res[0] == "gone" {
				continue // abandoned: this request may create the job
			}
		}
		switch res[0] {
		case "exists":
			return Enqueued{}, fmt.Errorf("%w: %s", ErrJobExists, id)
		case "dup":
			s.Stats.Deduplicated.Add(1)
			s.m.dedup.WithLabelValues(spec.Type, string(spec.Dedup.Policy), "deduplicated").Inc()
			e := Enqueued{JobID: res[1], Deduplicated: true}
			s.noteDuplicate(ctx, e, spec)
			return e, nil
		case "replace":
			replaced, err := s.replace(ctx, res[1], spec)
			if err != nil {
				return Enqueued{}, err
			}
			if replaced || try > 0 {
				s.Stats.Replaced.Add(1)
				s.m.dedup.WithLabelValues(spec.Type, string(spec.Dedup.Policy), "replaced").Inc()
				e := Enqueued{JobID: res[1], Deduplicated: true}
				s.finally(ctx, s.rdb.Pipeline(), spec, e)
				return e, nil
			}
			continue // the job started in between: its marker is gone, create anew
		}
		break
	}
	if err := s.deliver(ctx, client, tc, id, DeliveryID(id, 1), spec.OpKey, dedup, spec.Headers, firstDelay(spec)); err != nil {
		s.abandon(ctx, keys, id)
		return Enqueued{}, err
	}
	if err := s.confirm(ctx, keys, id, spec); err != nil {
		s.abandon(ctx, keys, id)
		return Enqueued{}, err
	}
	return Enqueued{JobID: id}, nil
}

// abandonWait bounds the clean-up of a job that was not accepted: the claim runs out on its own,
// so the answer to the caller is not held back for it.
const abandonWait = 500 * time.Millisecond

// abandon removes the record, timeline and dedup marker of a job that was not accepted, so a
// retry finds the key free at once rather than when the claim runs out.
func (s *Stack) abandon(ctx context.Context, keys jobKeys, id string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonWait)
	defer cancel()
	_ = abandonScript.Run(cctx, s.rdb, []string{keys.record, keys.timeline, keys.marker, keys.pending}, id).Err()
}

// confirm makes the job's record permanent (for its retention), its dedup marker last its TTL,
// and sends the caller's Finally commands, in one pipeline. Eval (not EvalSha) keeps the pipeline
// free of NOSCRIPT retries.
func (s *Stack) confirm(ctx context.Context, keys jobKeys, id string, spec Spec) error {
	ttl := int64(0)
	if d := spec.Dedup; d != nil && d.Policy != Throttle {
		ttl = ms(dedupTTL(d)) // a throttle's window runs from the create
	}
	pipe := s.rdb.Pipeline()
	cmd := confirmScript.Eval(ctx, pipe, []string{keys.marker, keys.pending, keys.record, keys.timeline},
		id, ttl, s.WriteDeadline(ctx), ms(s.cfg.Retention))
	s.finally(ctx, pipe, spec, Enqueued{JobID: id})
	state, err := cmd.Text()
	switch {
	case err != nil:
		return fmt.Errorf("engine: confirm job %s: %w", id, err)
	case state == "expired" || state == "gone":
		return fmt.Errorf("%w: job %s was %s at its confirmation", ErrNotAccepted, id, state)
	}
	return nil
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
// confirmed (then it covers the request: {"dup", id}, or {"replace", id} under that policy) or
// abandoned ({"gone"}: the request may create the job). Past pendingWait, or when that job's
// enqueuer died before confirming it, the answer is ErrDedupPending.
func (s *Stack) awaitConfirmation(ctx context.Context, keys jobKeys, policy Policy, existing string) ([]string, error) {
	other, err := s.keysFor(existing, "")
	if err != nil {
		return nil, err
	}
	deadline, pause := time.Now().Add(pendingWait), time.Millisecond
	for {
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		pause = min(2*pause, 50*time.Millisecond)
		state, err := pendingScript.Run(ctx, s.rdb, []string{keys.pending, other.record}, existing).Text()
		switch {
		case err != nil:
			return nil, fmt.Errorf("engine: dedup marker: %w", err)
		case state == "confirmed" && policy == Replace:
			return []string{"replace", existing}, nil
		case state == "confirmed":
			return []string{"dup", existing}, nil
		case state == "gone":
			return []string{"gone"}, nil
		case state == "unconfirmed" || time.Now().After(deadline):
			return nil, fmt.Errorf("%w: job %s", ErrDedupPending, existing)
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

func (s *Stack) create(ctx context.Context, keys jobKeys, id string, tc TaskConfig, spec Spec, dedup string, now time.Time) ([]string, error) {
	delivery := DeliveryID(id, 1)
	ev, _ := json.Marshal(map[string]any{"at": now.UnixMilli(), "event": "enqueued", "delivery": delivery})
	claim := ClaimTTL(ctx, claimTTL)
	policy, markerTTL := "", claim
	if d := spec.Dedup; d != nil {
		policy = string(d.Policy)
		if d.Policy == Throttle {
			markerTTL = dedupTTL(d)
		}
	}
	notBefore := int64(0)
	if spec.Dedup != nil && spec.Dedup.Policy == Replace && spec.Dedup.Debounce > 0 {
		notBefore = now.Add(spec.Dedup.Debounce).UnixMilli()
	}
	res, err := createScript.Run(ctx, s.rdb, []string{keys.record, keys.timeline, keys.marker, keys.pending},
		s.WriteDeadline(ctx), string(ev), policy, ms(markerTTL), id, ms(claim),
		"job_id", id, "type", spec.Type, "queue", tc.Queue, "tenant", spec.Tenant, "resource", spec.Resource,
		"status", "queued", "attempt", 0, "max_attempts", tc.MaxAttempts, "deliveries", 1, "delivery", delivery,
		"created_at", now.UnixMilli(), "updated_at", now.UnixMilli(), "payload", string(spec.Payload),
		"op_key", spec.OpKey, "dedup", dedup, "not_before", notBefore,
	).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("engine: create job: %w", err)
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("engine: create job: empty reply")
	}
	if res[0] == "expired" {
		return nil, fmt.Errorf("%w: job %s reached Redis after the deadline", ErrNotAccepted, id)
	}
	return res, nil
}

// noteDuplicate puts a deduplicated request on the existing job's timeline, in one round trip
// with the caller's Finally commands.
func (s *Stack) noteDuplicate(ctx context.Context, res Enqueued, spec Spec) {
	pipe := s.rdb.Pipeline()
	if keys, err := s.keysFor(res.JobID, ""); err == nil {
		s.queueEvents(ctx, pipe, keys, Event{Event: "deduplicated", Detail: string(spec.Dedup.Policy) + " " + spec.Dedup.Key})
	}
	s.finally(ctx, pipe, spec, res)
}

func (s *Stack) replace(ctx context.Context, existing string, spec Spec) (bool, error) {
	keys, err := s.keysFor(existing, "")
	if err != nil {
		return false, err
	}
	now := time.Now()
	notBefore := int64(0)
	if spec.Dedup.Debounce > 0 {
		notBefore = now.Add(spec.Dedup.Debounce).UnixMilli()
	}
	ev, _ := json.Marshal(map[string]any{"at": now.UnixMilli(), "event": "replaced", "detail": "replace " + spec.Dedup.Key})
	n, err := replaceScript.Run(ctx, s.rdb, []string{keys.record, keys.timeline},
		string(spec.Payload), notBefore, string(ev), s.cfg.TimelineCap, ms(s.cfg.Retention)).Int()
	if err != nil {
		return false, fmt.Errorf("engine: replace payload of %s: %w", existing, err)
	}
	return n == 1, nil
}

// Replay errors.
var (
	// ErrNotFailed: only a failed job can be replayed.
	ErrNotFailed = errors.New("engine: job is not failed")
	// ErrUnrunnable: what the job needs to run again is gone.
	ErrUnrunnable = errors.New("engine: job cannot run again")
)

// replayDelay is how long a replay's delivery waits before it may start: the replay script runs
// after the enqueue, and must land before the delivery starts.
const replayDelay = 2 * time.Second

// Replay gives a failed job a new delivery with its attempts reset. The delivery is enqueued
// first, delayed by replayDelay, and the record takes it afterwards, no later than the request's
// deadline and the delivery's start: a replay that fails at any step leaves the job failed as it
// was, and a delivery it enqueued finds the job failed and is acknowledged without running. It does
// not depend on asynq's archive (which asynq trims), only on the job record.
func (s *Stack) Replay(ctx context.Context, client *asynq.Client, id string) error {
	keys, err := s.keysFor(id, "")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrJobNotFound, err)
	}
	rec, err := s.rdb.HMGet(ctx, keys.record, "type", "op_key", "dedup", "status", "deliveries").Result()
	if err != nil {
		return fmt.Errorf("engine: read job %s: %w", id, err)
	}
	typ, _ := rec[0].(string)
	opKey, _ := rec[1].(string)
	dedup, _ := rec[2].(string)
	status, _ := rec[3].(string)
	deliveries, _ := rec[4].(string)
	if typ == "" {
		return fmt.Errorf("%w: %s", ErrJobNotFound, id)
	}
	if status != "failed" {
		return fmt.Errorf("%w: it is %s", ErrNotFailed, status)
	}
	tc, ok := s.TaskConfig(typ)
	if !ok {
		return fmt.Errorf("%w: type %q is no longer registered", ErrUnrunnable, typ)
	}
	n, _ := strconv.Atoi(deliveries)
	for try := 0; try < 3; try++ {
		n++
		// The delivery may start once replayDelay has passed: the record must take it before then.
		by := time.Now().Add(replayDelay - deadlineMargin).Add(s.ClockOffset()).UnixMilli()
		if d := s.WriteDeadline(ctx); d != 0 {
			by = min(by, d)
		}
		err = s.deliver(ctx, client, tc, id, DeliveryID(id, n), opKey, dedup, nil, replayDelay)
		if errors.Is(err, asynq.ErrTaskIDConflict) {
			continue // an earlier replay's delivery that the record never took: take the next number
		}
		if err != nil {
			return err
		}
		return s.takeReplay(ctx, keys, id, n, by)
	}
	return fmt.Errorf("engine: replay %s: %w", id, err)
}

// takeReplay makes the job take its replay's delivery n, if it is still failed and in time.
func (s *Stack) takeReplay(ctx context.Context, keys jobKeys, id string, n int, by int64) error {
	res, err := replayScript.Run(ctx, s.rdb, []string{keys.record, keys.timeline},
		by, time.Now().UnixMilli(), ms(s.cfg.Retention), s.cfg.TimelineCap, n).StringSlice()
	if err != nil {
		return fmt.Errorf("engine: replay %s: %w", id, err)
	}
	if len(res) == 0 {
		return fmt.Errorf("engine: replay %s: empty reply", id)
	}
	switch res[0] {
	case "ok":
		s.Stats.Replayed.Add(1)
		return nil
	case "gone":
		return fmt.Errorf("%w: %s", ErrJobNotFound, id)
	case "conflict":
		if len(res) > 1 {
			return fmt.Errorf("%w: it is %s", ErrNotFailed, res[1])
		}
		return ErrNotFailed
	case "unrunnable":
		return fmt.Errorf("%w: its payload is gone", ErrUnrunnable)
	case "moved":
		return fmt.Errorf("%w: another replay took it", ErrNotFailed)
	}
	return fmt.Errorf("%w: replay of %s reached Redis too late", ErrNotAccepted, id)
}

func (s *Stack) deliver(ctx context.Context, client *asynq.Client, tc TaskConfig, id, delivery, opKey, dedup string, extra map[string]string, delay time.Duration) error {
	headers := map[string]string{HeaderJobID: id}
	if opKey != "" {
		headers[HeaderOpKey] = opKey
	}
	if dedup != "" {
		headers[HeaderDedup] = dedup
	}
	for k, v := range extra {
		headers[k] = v
	}
	opts := []asynq.Option{asynq.TaskID(delivery), asynq.Queue(tc.Queue), asynq.MaxRetry(asynqRetryAllowance)}
	if tc.Timeout > 0 {
		opts = append(opts, asynq.Timeout(tc.Timeout))
	}
	if delay > 0 {
		opts = append(opts, asynq.ProcessIn(delay))
	}
	// The task's payload is informational (asynqmon shows it); the job record's is authoritative.
	if _, err := client.EnqueueContext(ctx, asynq.NewTaskWithHeaders(tc.Type, nil, headers), opts...); err != nil {
		return fmt.Errorf("engine: enqueue delivery %s: %w", delivery, err)
	}
	return nil
}

// Event is one entry of a job's timeline.
type Event struct {
	At       int64  `json:"at"`
	Event    string `json:"event"`
	Delivery string `json:"delivery,omitempty"`
	Token    int64  `json:"token,omitempty"`
	Attempt  int    `json:"attempt,omitempty"`
	Worker   string `json:"worker,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// View is everything known about a job: its record, the live lease of its resource, its timeline.
type View struct {
	Record   map[string]string
	Lease    locking.LeaseInfo
	Timeline []Event
}

// ErrJobNotFound: no record for the id (never created, or expired after its retention).
var ErrJobNotFound = errors.New("engine: job not found")

// Get reads a job's view in one round trip.
func (s *Stack) Get(ctx context.Context, id string) (View, error) {
	keys, err := s.keysFor(id, "")
	if err != nil {
		return View{}, fmt.Errorf("%w: %w", ErrJobNotFound, err)
	}
	pipe := s.rdb.Pipeline()
	rec := pipe.HGetAll(ctx, keys.record)
	tl := pipe.LRange(ctx, keys.timeline, 0, -1)
	owner := pipe.Get(ctx, keys.lease)
	ttl := pipe.PTTL(ctx, keys.lease)
	fence := pipe.Get(ctx, keys.fence)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return View{}, fmt.Errorf("engine: read job %s: %w", id, err)
	}
	v := View{Record: rec.Val()}
	if len(v.Record) == 0 {
		return View{}, fmt.Errorf("%w: %s", ErrJobNotFound, id)
	}
	delete(v.Record, locking.FieldFenceOwner)
	delete(v.Record, locking.FieldFenceToken)
	v.Lease.Owner = owner.Val()
	if d := ttl.Val(); d > 0 {
		v.Lease.Remaining = d
	}
	v.Lease.Fence, _ = fence.Int64()
	for _, raw := range tl.Val() {
		var e Event
		if json.Unmarshal([]byte(raw), &e) == nil {
			v.Timeline = append(v.Timeline, e)
		}
	}
	return v, nil
}
