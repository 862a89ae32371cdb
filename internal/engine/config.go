package engine

import (
	"context"
	"os"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/seal"
	"github.com/jobguard/jobguard/locking"
)

// Task headers a delivery carries.
const (
	HeaderJobID = "jobguard-job-id"
	// HeaderOpKey is the job's operation key (execution idempotency): the task type's, or the
	// request's Idempotency-Key.
	HeaderOpKey = "jobguard-op-key"
	// HeaderDedup is the job's dedup policy and key, "<policy>:<key>".
	HeaderDedup = "jobguard-dedup"
)

// Config configures a Stack; the zero value of each field means its documented default.
type Config struct {
	// Prefix is put before every key (default "jobguard").
	Prefix string
	// WorkerID names this process in records, timelines and logs (default host-pid).
	WorkerID string
	// Concurrency is the most handlers that may run at once in this process, zombies included
	// (default 10). Set it to the asynq server's Concurrency.
	Concurrency int
	// LeaseTTL is the default resource lease TTL (default 30s).
	LeaseTTL time.Duration
	// Retention is how long job records and timelines live after their last change (default 7 days).
	Retention time.Duration
	// TimelineCap is the most events kept per job; older ones are dropped (default 100).
	TimelineCap int
	// SlotWait is how long a delivery waits for a free slot before it bounces (default 1s).
	SlotWait time.Duration
	// BounceDelay is the least delay of a bounce; a random part of the same size is added (default 1s).
	BounceDelay time.Duration
	// Logger receives one event per job outcome (default: no logging).
	Logger *zerolog.Logger
	// Clock gives the time of every rule the engine decides in Go (debounce, rate-limit age,
	// pending waits, rescue staleness, timestamps); default the system clock. Redis's TTLs run on
	// Redis's own clock whatever it says.
	Clock locking.Clock
	// DurableReplicas turns on durable mode: the writes that make a promise (an enqueue's
	// confirmation, a run's start, a done job's finish, Job.Apply) wait, with Redis WAIT in
	// their round trip, until this many replicas hold them, and fail with ErrNotDurable when
	// they do not within DurableTimeout (default 0: off). See durable.go.
	DurableReplicas int
	// DurableTimeout bounds each wait for the replicas (default 1s); an earlier deadline of the
	// caller's shortens it.
	DurableTimeout time.Duration
	// Keys is the key ring that encrypts the data of the task types marked Encrypt (the first key
	// seals, every key opens) and opens what any key of it sealed (default none: a type marked
	// Encrypt is refused by Register, and a sealed value does not open).
	Keys *seal.Ring
	// FairMetricKeys is how many keys per fairly dispatched type the admission gauges name in a
	// label, the top by backlog and by running jobs (default 0: none). Keys are tenant ids in the
	// template: turn it on only where /metrics is read by operators, never by tenants.
	FairMetricKeys int
}

// WithDefaults is c with each zero field set to its documented default. middleware.Config takes
// the defaults of the fields it shares from here, so each is written once.
func (c Config) WithDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = "jobguard"
	}
	if c.WorkerID == "" {
		host, _ := os.Hostname()
		c.WorkerID = host + "-" + strconv.Itoa(os.Getpid())
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 10
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 30 * time.Second
	}
	if c.Retention <= 0 {
		c.Retention = 7 * 24 * time.Hour
	}
	if c.TimelineCap <= 0 {
		c.TimelineCap = 100
	}
	if c.SlotWait <= 0 {
		c.SlotWait = time.Second
	}
	if c.BounceDelay < minDelay {
		c.BounceDelay = minDelay
	}
	if c.Logger == nil {
		nop := zerolog.Nop()
		c.Logger = &nop
	}
	if c.Clock == nil {
		c.Clock = locking.SystemClock
	}
	if c.DurableReplicas > 0 && c.DurableTimeout <= 0 {
		c.DurableTimeout = jobstore.DefaultDurableTimeout
	}
	return c
}

// TaskConfig is how one task type is protected.
type TaskConfig struct {
	// Type is the asynq task type name.
	Type string
	// Queue is the queue its deliveries go to (default "default").
	Queue string
	// MaxAttempts is the attempt budget (default 5). Bounces never spend it.
	MaxAttempts int
	// Backoff between failed attempts (default 1s doubling to 5m, full jitter).
	Backoff Backoff
	// Timeout bounds one run (asynq Timeout, whole seconds; default 0: asynq's 30 minutes).
	Timeout time.Duration
	// LeaseTTL overrides the stack's lease TTL for this type.
	LeaseTTL time.Duration
	// AppliedTTL is how long applied-operation records are kept (default 0: for ever, as live data).
	AppliedTTL time.Duration
	// RateLimitMaxAge bounds how long a job may keep bouncing on rate limits, measured from its
	// creation; past it a rate limit spends an attempt like a transient error (default 1h).
	RateLimitMaxAge time.Duration
	// StartWithin is the default deadline of the type's jobs, from their creation: a job that has
	// not started within it (retries included) expires instead of running late. Spec.StartBy
	// replaces it for one job (default 0: no deadline).
	StartWithin time.Duration
	// Limit bounds the type's jobs per key (concurrency, rate) across every process; the zero
	// value limits nothing. See Limit.
	Limit Limit
	// Fair admits the type's jobs into asynq fairly across keys (weights, per-key limits without
	// bounces, sequences) instead of enqueueing them at once; nil: asynq's FIFO. See Fair.
	Fair *Fair
	// Encrypt seals the type's payloads, results and checkpoints at rest with Config.Keys
	// (AES-256-GCM); the handler and Stack.Open see plaintext (default false).
	Encrypt bool
}

func (tc TaskConfig) withDefaults(s Config) TaskConfig {
	if tc.Queue == "" {
		tc.Queue = jobstore.DefaultQueue
	}
	if tc.MaxAttempts <= 0 {
		tc.MaxAttempts = jobstore.DefaultMaxAttempts
	}
	tc.Backoff = tc.Backoff.withDefaults()
	if tc.LeaseTTL <= 0 {
		tc.LeaseTTL = s.LeaseTTL
	}
	if tc.RateLimitMaxAge <= 0 {
		tc.RateLimitMaxAge = time.Hour
	}
	tc.Limit = tc.Limit.withDefaults()
	return tc
}

// Handler is business logic: it gets the job and returns nil, or an error classed with Transient,
// RateLimited, Permanent or Revoked (unclassed errors are transient).
type Handler func(ctx context.Context, job *Job) error
