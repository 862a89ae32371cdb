package middleware

import (
	"context"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/engine"
)

// Dedup policies: how a request whose dedup key matches a live job collapses into it.
const (
	// UntilStarted: a duplicate while the job has not started is the same job.
	UntilStarted = "until_started"
	// UntilDone: a duplicate while the job has not ended is the same job.
	UntilDone = "until_done"
	// Throttle: at most one job per key per window (Dedup.TTL).
	Throttle = "throttle"
	// Replace: a duplicate before the start replaces the waiting job's payload (debounce).
	Replace = "replace"
)

// Dedup is a job's dedup policy and key; the key is scoped to the job's resource.
type Dedup struct {
	// Policy is one of UntilStarted, UntilDone, Throttle, Replace ("" : no dedup).
	Policy string
	Key    string
	// TTL bounds how long the marker may collapse requests (default 24h); Throttle's window.
	TTL time.Duration
	// Debounce (Replace only) delays the start to Debounce after the latest request.
	Debounce time.Duration
}

// EnqueueOptions says how Guard.Enqueue makes a job of a task.
type EnqueueOptions struct {
	// Tenant is recorded for views and authorization, and may be a limit key.
	Tenant string
	// Resource is what the job's lease protects: jobs of one resource never run at once. Empty:
	// the job is its own resource.
	Resource string
	// OpKey turns on execution idempotency: a job whose operation was applied is done at once,
	// and Run.Apply commits an effect once per OpKey.
	OpKey string
	// Dedup collapses duplicate requests (needs a Resource).
	Dedup Dedup
	// ProcessIn delays the first delivery.
	ProcessIn time.Duration
	// StartBy: a job not started by then (retries included) ends expired instead of running late.
	StartBy time.Time
	// Tags label the job for lists and searches (GET /jobs?tag=, the jobs page): at most 8, each
	// 1-64 characters of A-Z a-z 0-9 . _ : = -, duplicates folded; others fail with ErrBadTags.
	Tags []string
}

// Enqueued is what Enqueue did.
type Enqueued struct {
	JobID string
	// Deduplicated: an existing job covers the request (its id is JobID).
	Deduplicated bool
	// Waiting: the new job's type is dispatched fairly (Job.Fair) and the job waits in the
	// admission layer for its key's turn, not in asynq (status waiting until it starts).
	Waiting bool
}

// Enqueue makes a job of task, whose type must be protected at job level, and delivers it to
// asynq once its record is confirmed: when Enqueue returns nil the job exists and will run.
func (g *Guard) Enqueue(ctx context.Context, task *asynq.Task, o EnqueueOptions) (Enqueued, error) {
	spec := engine.Spec{
		Type: task.Type(), Tenant: o.Tenant, Resource: o.Resource, Payload: task.Payload(), OpKey: o.OpKey,
		Headers: task.Headers(), ProcessIn: o.ProcessIn, StartBy: o.StartBy, Tags: o.Tags,
	}
	if o.Dedup.Policy != "" {
		spec.Dedup = &engine.Dedup{Policy: engine.Policy(o.Dedup.Policy), Key: o.Dedup.Key, TTL: o.Dedup.TTL, Debounce: o.Dedup.Debounce}
	}
	res, err := g.stack.Enqueue(ctx, g.enqueuer, spec)
	return Enqueued{JobID: res.JobID, Deduplicated: res.Deduplicated, Waiting: res.Waiting}, err
}

// optionsOf is what a limit's Key sees of a spec.
func optionsOf(s engine.Spec) EnqueueOptions {
	o := EnqueueOptions{Tenant: s.Tenant, Resource: s.Resource, OpKey: s.OpKey, ProcessIn: s.ProcessIn, StartBy: s.StartBy, Tags: s.Tags}
	if s.Dedup != nil {
		o.Dedup = Dedup{Policy: string(s.Dedup.Policy), Key: s.Dedup.Key, TTL: s.Dedup.TTL, Debounce: s.Dedup.Debounce}
	}
	return o
}

// JobStatus is a job's state as its record says.
type JobStatus struct {
	ID, Type, Tenant, Status string
	Attempt, MaxAttempts     int
	// Progress (0-100) and ProgressNote are the last the handler reported.
	Progress     int
	ProgressNote string
	Result       string
	LastError    string
	CreatedAt    time.Time
	FinishedAt   time.Time
}

// Status reads job id's record; engine errors say when it does not exist (ErrJobNotFound).
func (g *Guard) Status(ctx context.Context, id string) (JobStatus, error) {
	v, err := g.stack.Get(ctx, id)
	if err == nil {
		v, err = g.stack.Open(v) // the result, decrypted
	}
	if err != nil {
		return JobStatus{}, err
	}
	r := v.Record
	return JobStatus{
		ID: r.JobID, Type: r.Type, Tenant: r.Tenant, Status: string(r.Status), Attempt: r.Attempt, MaxAttempts: r.MaxAttempts,
		Progress: r.Progress, ProgressNote: r.ProgressNote, Result: r.Result, LastError: r.LastError,
		CreatedAt: r.CreatedAt, FinishedAt: r.FinishedAt,
	}, nil
}

// ErrBadTags: EnqueueOptions.Tags break the rules (more than 8, or a tag that is empty, longer
// than 64 characters or outside A-Z a-z 0-9 . _ : = -).
var ErrBadTags = engine.ErrBadTags

// ErrJobNotFound: no job has that id (or its record expired).
var ErrJobNotFound = engine.ErrJobNotFound

// Cancel cancels job id: a waiting job never runs; a running one has its fence raised (its
// writes are refused from then on) and its handler's context cancelled. by and why go on its
// timeline.
func (g *Guard) Cancel(ctx context.Context, id, by, why string) error {
	_, err := g.stack.Cancel(ctx, id, engine.CancelRequest{By: by, Why: why})
	return err
}
