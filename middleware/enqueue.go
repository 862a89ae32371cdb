package middleware

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
var ErrJobExists = errors.New("middleware: job exists")

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
	// JobID is the id to use (from NewJobID for Resource); empty: a fresh one.
	JobID string
	// Headers travel with every delivery (e.g. the trace context).
	Headers map[string]string
	// ProcessIn delays the first delivery.
	ProcessIn time.Duration
}

// Enqueue creates the job record, then its first delivery. When asynq does not take the delivery,
// the record is removed again, so no job is left queued without a delivery.
func (s *Stack) Enqueue(ctx context.Context, client *asynq.Client, spec Spec) (string, error) {
	tc, ok := s.TaskConfig(spec.Type)
	if !ok {
		return "", fmt.Errorf("%w: %q", ErrUnknownType, spec.Type)
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
	if spec.OpKey != "" {
		if err := locking.ValidateResource(spec.OpKey); err != nil {
			return "", fmt.Errorf("middleware: operation key: %w", err)
		}
	}
	keys, err := s.keysFor(id, spec.OpKey)
	if err != nil {
		return "", err
	}
	delivery := DeliveryID(id, 1)
	ev, _ := json.Marshal(map[string]any{"at": now.UnixMilli(), "event": "enqueued", "delivery": delivery})
	created, err := createScript.Run(ctx, s.rdb, []string{keys.record, keys.timeline},
		ms(s.cfg.Retention), string(ev),
		"job_id", id, "type", spec.Type, "queue", tc.Queue, "tenant", spec.Tenant, "resource", spec.Resource,
		"status", "queued", "attempt", 0, "max_attempts", tc.MaxAttempts, "deliveries", 1, "delivery", delivery,
		"created_at", now.UnixMilli(), "updated_at", now.UnixMilli(), "payload", string(spec.Payload), "op_key", spec.OpKey,
	).Int()
	if err != nil {
		return "", fmt.Errorf("middleware: create job: %w", err)
	}
	if created == 0 {
		return "", fmt.Errorf("%w: %s", ErrJobExists, id)
	}
	if err := s.deliver(ctx, client, tc, id, delivery, spec); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		s.rdb.Del(cctx, keys.record, keys.timeline)
		return "", err
	}
	return id, nil
}

func (s *Stack) deliver(ctx context.Context, client *asynq.Client, tc TaskConfig, id, delivery string, spec Spec) error {
	headers := map[string]string{HeaderJobID: id}
	if spec.OpKey != "" {
		headers[HeaderOpKey] = spec.OpKey
	}
	for k, v := range spec.Headers {
		headers[k] = v
	}
	opts := []asynq.Option{asynq.TaskID(delivery), asynq.Queue(tc.Queue), asynq.MaxRetry(asynqRetryAllowance)}
	if tc.Timeout > 0 {
		opts = append(opts, asynq.Timeout(tc.Timeout))
	}
	if spec.ProcessIn > 0 {
		opts = append(opts, asynq.ProcessIn(spec.ProcessIn))
	}
	if _, err := client.EnqueueContext(ctx, asynq.NewTaskWithHeaders(spec.Type, spec.Payload, headers), opts...); err != nil {
		return fmt.Errorf("middleware: enqueue delivery %s: %w", delivery, err)
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
var ErrJobNotFound = errors.New("middleware: job not found")

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
		return View{}, fmt.Errorf("middleware: read job %s: %w", id, err)
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
