package middleware

import (
	"time"

	"github.com/hibiken/asynq"
)

// Lease is lease-level protection for a task type that any producer enqueues with a plain
// asynq client: each delivery runs under a lease of its resource (one run per resource at a
// time, across every process), with batched heartbeats, a fencing token for its writes and
// Run.Apply for effects applied once. A dead or paused worker's task is rescued within about the
// lease TTL (Guard.Run). No job record is kept; attempts and retries stay asynq's (the
// application's RetryDelayFunc).
type Lease struct {
	// Resource names what the task's run must hold alone, from the task (its payload, say): a pure
	// function of the task, since the rescuer asks it again of tasks other processes run. An error
	// (or a panic) fails the task for good (asynq.SkipRetry). Required.
	Resource func(*asynq.Task) (string, error)
	// TTL overrides the guard's LeaseTTL for this type.
	TTL time.Duration
	// OpKey is the operation key of Run.Apply (default: the asynq task id, kept across retries
	// and rescues).
	OpKey func(*asynq.Task) string
	// AppliedTTL is how long Run.Apply's applied-operation records are kept. Default: the
	// guard's Retention when OpKey is nil (the op key is then the task id, which no delivery
	// presents once the task is gone), for ever (live data) when OpKey names an operation.
	AppliedTTL time.Duration
	// FenceTTL is how long a resource's fence counter outlives its last acquisition (default 0:
	// for ever, as a long-lived resource's must). Set it when resources die with their tasks (one
	// per task), so that Redis does not keep a counter per finished task; it must outlive every
	// write that holds one of its tokens.
	FenceTTL time.Duration
	// Limit bounds the type's runs per key (a tenant, an upstream host) across every process,
	// on top of the one run per resource (zero: no bound).
	Limit LeaseLimit
}

// LeaseLimit bounds a lease-level type's runs per key across every process: at most Concurrency
// running at once and Rate starts per Per. The zero value limits nothing.
//
// A delivery takes a slot of its key before its lease, and holds it until its handler returns,
// zombies included (the guard renews it in batches while the handler runs, even one that ignores
// its context). A delivery over the limit waits without failing: it bounces (asynq retries it in
// 1-2 s, or when the rate's next start is due, without counting a failure), or, on its last
// retry, where asynq would archive a bounce, waits for a slot in the process until its context
// ends. A holder that dies frees its slot within the lease TTL; one cut off from Redis has its
// context cancelled (cause ErrSlotLost) at 0.8 of the TTL after its last renewal, before Redis
// frees the slot, and Run.ValidFor says so at once. What it cannot bound: a handler cut off from
// Redis that ignores both its context and ValidFor runs on after its slot went to another.
type LeaseLimit struct {
	// Key is the limit key of a task (from its payload, say); a task whose key is "" is not
	// limited. nil: one key for the whole type.
	Key func(*asynq.Task) string
	// Concurrency is the most runs of one key at once (0: no bound).
	Concurrency int
	// Rate is the most starts of one key per Per (0: no rate); Per defaults to 1s. Starts are
	// spaced by Per/Rate, Redis's clock, across every process.
	Rate int
	Per  time.Duration
	// Burst is how many of Rate may start back to back (default 1).
	Burst int
}

// Job is job-level protection for a task type enqueued through Guard.Enqueue: on top of the
// lease level, a job record with status and timeline, attempts counted by jobguard (bounces never
// spend one), its own backoff, dedup policies, cancel, progress, checkpoints, start-by deadlines
// and limits per key. A task of the type enqueued with a plain asynq client carries no job, and is
// run at lease level (on Resource, else its task id) with a log line and a metric: never
// archived for it.
type Job struct {
	// Queue is the asynq queue of its deliveries (default "default").
	Queue string
	// MaxAttempts is the attempt budget (default 5).
	MaxAttempts int
	// Backoff between failed attempts: full jitter, doubling from BackoffBase (default 1s) up to
	// BackoffMax (default 5m).
	BackoffBase, BackoffMax time.Duration
	// Timeout bounds one run (asynq's Timeout, whole seconds; default asynq's 30 minutes).
	Timeout time.Duration
	// LeaseTTL overrides the guard's LeaseTTL for this type.
	LeaseTTL time.Duration
	// AppliedTTL is how long applied-operation records are kept (default 0: for ever).
	AppliedTTL time.Duration
	// StartWithin is the default deadline of the type's jobs from their creation (0: none).
	StartWithin time.Duration
	// Limit bounds the type's jobs per key across every process (zero: no bound).
	Limit Limit
	// Fair admits the type's jobs into asynq fairly across keys, with weights, per-key limits
	// that wait instead of bouncing, and sequences (nil: asynq's FIFO order). See Fair.
	Fair *Fair
	// Resource names the resource of a task of this type that arrives without a job (a plain
	// asynq enqueue), for its lease-level run; nil: the task is its own resource.
	Resource func(*asynq.Task) (string, error)
	// Encrypt keeps the type's payloads, results and checkpoints encrypted at rest in Redis with
	// Config.Keys (AES-256-GCM, bound to the job and field). The handler, Run and Status see
	// plaintext; a job whose data does not decrypt fails for good (ErrUndecryptable). A task of
	// the type enqueued with a plain asynq client carries its payload in asynq's task, which is
	// asynq's and not encrypted (default false).
	Encrypt bool
}

// Limit bounds a job-level type's jobs per key: at most Concurrency running at once and Rate
// starts per Per, across every process. A delivery over its limit waits without spending an
// attempt. The zero value limits nothing.
type Limit struct {
	// Key is the limit key of a job from its enqueue options (its tenant, say); "" is not
	// limited. nil: one key for the whole type.
	Key func(EnqueueOptions) string
	// Concurrency is the most jobs of one key running at once (0: no bound).
	Concurrency int
	// Rate is the most starts of one key per Per (0: no rate); Per defaults to 1s.
	Rate int
	Per  time.Duration
	// Burst is how many of Rate may start back to back (default 1).
	Burst int
}

// String is the limit as TASK_LIMITS-style text ("concurrency=2,rate=10/1s"), "none" when it
// limits nothing.
func (l Limit) String() string { return l.engine().String() }
