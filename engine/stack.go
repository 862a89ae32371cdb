package engine

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobguard/jobguard/internal/redact"
	"github.com/jobguard/jobguard/locking"
)

//go:embed scripts/*.lua
var scriptFS embed.FS

func mustScript(name string) *redis.Script {
	b, err := scriptFS.ReadFile("scripts/" + name)
	if err != nil {
		panic(err)
	}
	return redis.NewScript(string(b))
}

func mustDeadlineScript(name string) *redis.Script {
	b, err := scriptFS.ReadFile("scripts/" + name)
	if err != nil {
		panic(err)
	}
	return NewDeadlineScript(string(b))
}

var (
	startScript   = mustScript("start.lua")
	finishScript  = mustScript("finish.lua")
	eventScript   = mustScript("event.lua")
	createScript  = mustDeadlineScript("create.lua")
	confirmScript = mustDeadlineScript("confirm.lua")
	pendingScript = mustScript("pending.lua")
	abandonScript = mustScript("abandon.lua")
	replaceScript = mustScript("replace.lua")
	replayScript  = mustDeadlineScript("replay.lua")
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
}

func (c Config) withDefaults() Config {
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
}

func (tc TaskConfig) withDefaults(s Config) TaskConfig {
	if tc.Queue == "" {
		tc.Queue = "default"
	}
	if tc.MaxAttempts <= 0 {
		tc.MaxAttempts = 5
	}
	tc.Backoff = tc.Backoff.withDefaults()
	if tc.LeaseTTL <= 0 {
		tc.LeaseTTL = s.LeaseTTL
	}
	if tc.RateLimitMaxAge <= 0 {
		tc.RateLimitMaxAge = time.Hour
	}
	return tc
}

// Handler is business logic: it gets the job and returns nil, or an error classed with Transient,
// RateLimited, Permanent or Revoked (unclassed errors are transient).
type Handler func(ctx context.Context, job *Job) error

// Stack protects the handlers of registered task types. Order of the layers around a handler:
// slot (bounded concurrency) -> start script (stale-delivery check, lease + fence, attempt, status,
// already-applied, checkpoint) -> heartbeat (keeper) -> panic recovery -> handler -> finish script
// (status, idempotency commit, release) -> retry decision for asynq.
type Stack struct {
	cfg    Config
	rdb    redis.UniversalClient
	locks  *locking.Client
	keeper *locking.Keeper
	log    zerolog.Logger
	sema   chan struct{}

	mu       sync.Mutex
	types    map[string]registered
	running  map[*Job]context.Context
	stopping atomic.Bool
	wg       sync.WaitGroup

	rng   *rand.Rand
	rngMu sync.Mutex
	// clockOffset is Redis's clock minus this process's, in ns (SyncClock).
	clockOffset atomic.Int64
	Stats       Stats
	m           *metrics
}

type registered struct {
	cfg     TaskConfig
	handler Handler
}

// Stats are the stack's counters since start; metrics read them.
type Stats struct {
	Started, Succeeded, Retried, Failed, Revoked, Requeued    atomic.Int64
	Bounces, StaleDeliveries, StaleWrites, InvalidTransitions atomic.Int64
	AlreadyApplied, LeaseLost, Panics                         atomic.Int64
	Deduplicated, Replaced, Replayed                          atomic.Int64
	Rescued                                                   atomic.Int64
	// LastRescueLatency is the time from a rescued job's lease lapse to its new delivery, in ns.
	LastRescueLatency atomic.Int64
}

func (s *Stack) observeRescue(d time.Duration) {
	s.Stats.LastRescueLatency.Store(int64(d))
	s.m.rescueLatency.Observe(d.Seconds())
}

// New builds a stack on rdb. Close stops its keeper.
func New(rdb redis.UniversalClient, cfg Config) *Stack {
	cfg = cfg.withDefaults()
	locks := locking.New(rdb, locking.WithPrefix(cfg.Prefix), locking.WithOwnerPrefix(cfg.WorkerID))
	s := &Stack{
		cfg: cfg, rdb: rdb, locks: locks, keeper: locks.NewKeeper(), log: *cfg.Logger,
		sema: make(chan struct{}, cfg.Concurrency), types: map[string]registered{}, running: map[*Job]context.Context{},
		rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
	}
	s.m = newMetrics(s)
	return s
}

// Locks is the stack's locking client (same prefix), for task handlers and the API.
func (s *Stack) Locks() *locking.Client { return s.locks }

// Register adds a task type and its handler. Registering the same type twice panics.
func (s *Stack) Register(tc TaskConfig, h Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.types[tc.Type]; dup || tc.Type == "" {
		panic(fmt.Sprintf("engine: task type %q registered twice or empty", tc.Type))
	}
	s.types[tc.Type] = registered{cfg: tc.withDefaults(s.cfg), handler: h}
	s.m.initSeries(tc.Type)
}

// TaskConfig returns the effective configuration of a registered type.
func (s *Stack) TaskConfig(typ string) (TaskConfig, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.types[typ]
	return r.cfg, ok
}

// Mux returns an asynq ServeMux serving every registered type through the stack.
func (s *Stack) Mux() *asynq.ServeMux {
	mux := asynq.NewServeMux()
	s.mu.Lock()
	defer s.mu.Unlock()
	for typ, r := range s.types {
		mux.Handle(typ, s.wrap(r))
	}
	return mux
}

// ServerConfig completes an asynq server configuration for the stack: its retry delays and
// failure test, and the 1 s scheduling tick that is the floor of bounce and retry delays.
func (s *Stack) ServerConfig(c asynq.Config) asynq.Config {
	c.RetryDelayFunc = RetryDelay
	c.IsFailure = IsFailure
	c.DelayedTaskCheckInterval = minDelay
	if c.Concurrency == 0 {
		c.Concurrency = s.cfg.Concurrency
	}
	return c
}

// BeginShutdown tells the stack that the server is stopping: handlers cancelled from now on are
// requeued (their attempt given back) instead of counted as failures.
func (s *Stack) BeginShutdown() { s.stopping.Store(true) }

// Wait waits until every running handler returned or ctx ends, and reports how many still run.
func (s *Stack) Wait(ctx context.Context) int {
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return 0
	case <-ctx.Done():
		return s.Running()
	}
}

// Close stops renewing leases. Leases of handlers still running are left to expire.
func (s *Stack) Close() { s.keeper.Close() }

// Running is how many handlers run now, zombies included.
func (s *Stack) Running() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.running)
}

// Zombies is how many running handlers asynq has given up on (their context ended: timeout,
// shutdown abort) but that have not returned. They still hold a slot.
func (s *Stack) Zombies() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, ctx := range s.running {
		if ctx.Err() != nil {
			n++
		}
	}
	return n
}

func (s *Stack) jitter(base time.Duration) time.Duration {
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return base + time.Duration(s.rng.Int64N(int64(base)+1))
}

func (s *Stack) bounce(typ, reason string, after time.Duration, err error) error {
	s.Stats.Bounces.Add(1)
	s.m.bounces.WithLabelValues(typ, reason).Inc()
	return &delayed{bounce: true, reason: reason, delay: max(after, s.jitter(s.cfg.BounceDelay)), err: err}
}

// keys of one job, all in the resource's slot.
type jobKeys struct {
	tag, record, timeline, lease, fence, applied, marker string
	// pending flags a marker whose job's first delivery is not yet confirmed.
	pending string
	// clear says when the dedup marker is cleared: "start", "done" or "" (never: throttle).
	clear string
}

// withDedup adds the job's dedup marker ("<policy>:<key>", as in HeaderDedup) to its keys.
func (k jobKeys) withDedup(s *Stack, dedup string) jobKeys {
	policy, key, ok := strings.Cut(dedup, ":")
	if !ok || key == "" {
		return k
	}
	k.marker = s.locks.Key(k.tag, "dedup:"+key)
	k.pending = s.locks.Key(k.tag, "dedup-pending:"+key)
	k.clear = Policy(policy).clearsAt()
	return k
}

func (s *Stack) keysFor(jobID, opKey string) (jobKeys, error) {
	tag, err := TagOf(jobID)
	if err != nil {
		return jobKeys{}, err
	}
	k := jobKeys{
		tag:      tag,
		record:   s.locks.Key(tag, "job:"+jobID),
		timeline: s.locks.Key(tag, "job:"+jobID+":timeline"),
		lease:    s.locks.LeaseKey(tag),
		fence:    s.locks.FenceKey(tag),
	}
	k.applied = k.record // a key of the slot that is never an applied record
	k.marker = k.record  // likewise for the dedup marker
	k.pending = k.record
	if opKey != "" {
		k.applied = s.locks.Key(tag, "applied:"+opKey)
	}
	return k, nil
}

func (s *Stack) wrap(r registered) asynq.HandlerFunc {
	tc := r.cfg
	return func(ctx context.Context, t *asynq.Task) (err error) {
		jobID := t.Headers()[HeaderJobID]
		opKey := t.Headers()[HeaderOpKey]
		delivery, _ := asynq.GetTaskID(ctx)
		keys, err := s.keysFor(jobID, opKey)
		if err != nil {
			// Not a jobguard delivery: nothing to protect or retry.
			return fmt.Errorf("%w: %w", err, asynq.SkipRetry)
		}
		keys = keys.withDedup(s, t.Headers()[HeaderDedup])
		ctx, span := startRunSpan(ctx, t, jobID, delivery)
		defer func() { endSpan(span, err) }()
		log := s.log.With().Str("job_id", jobID).Str("delivery", delivery).Str("type", tc.Type).Str("worker_id", s.cfg.WorkerID).
			Str("trace_id", traceID(span)).Logger()

		// Slot: released only when the handler returns, zombies included.
		slot := time.NewTimer(s.cfg.SlotWait)
		select {
		case s.sema <- struct{}{}:
			slot.Stop()
		case <-slot.C:
			s.event(ctx, keys, Event{Event: "bounced", Delivery: delivery, Detail: "no free slot in " + s.cfg.WorkerID})
			log.Info().Str("event", "bounced").Str("reason", "no_slot").Msg("no free slot")
			return s.bounce(tc.Type, "no_slot", 0, errors.New("no free slot"))
		case <-ctx.Done():
			slot.Stop()
			return s.bounce(tc.Type, "cancelled", 0, context.Cause(ctx))
		}
		defer func() { <-s.sema }()

		owner := s.locks.NewOwner()
		var sent time.Time
		var res []any
		for try := 0; ; try++ {
			sent = s.locks.Now()
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			wctx, sspan := scriptSpan(wctx, "jobguard.start")
			res, err = startScript.Run(wctx, s.rdb,
				[]string{keys.record, keys.lease, keys.fence, keys.timeline, keys.applied, keys.marker},
				delivery, owner, ms(tc.LeaseTTL), sent.UnixMilli(), s.cfg.WorkerID, s.cfg.TimelineCap, bit(opKey != ""), ms(s.cfg.Retention), keys.clear,
			).Slice()
			endSpan(sspan, err)
			cancel()
			// A delivery can start before its enqueuer's confirmation lands (about a round trip
			// later): wait for it briefly rather than bounce for a second.
			if err != nil || len(res) == 0 || res[0] != "unconfirmed" || try == len(unconfirmedWaits) {
				break
			}
			time.Sleep(unconfirmedWaits[try])
		}
		if err == nil && len(res) == 0 {
			err = errors.New("empty reply")
		}
		if err != nil {
			// Unknown whether it ran: the lease (if taken) lapses within its TTL; try again soon.
			return s.bounce(tc.Type, "start_failed", 0, fmt.Errorf("start script: %w", err))
		}
		switch res[0].(string) {
		case "gone", "terminal", "stale":
			s.Stats.StaleDeliveries.Add(1)
			s.m.staleDeliveries.WithLabelValues(tc.Type).Inc()
			log.Info().Str("event", "stale_delivery").Str("state", fmt.Sprint(res...)).Msg("delivery acknowledged without running")
			return nil
		case "unconfirmed":
			return s.bounce(tc.Type, "unconfirmed", 0, errors.New("the job's enqueue is not confirmed yet"))
		case "debounce":
			wait := time.Duration(res[1].(int64)) * time.Millisecond
			return s.bounce(tc.Type, "debounce", wait, errors.New("replaced payload waits for its debounce"))
		case "busy":
			remaining := time.Duration(res[1].(int64)) * time.Millisecond
			s.m.lease.WithLabelValues(tc.Type, "not_acquired").Inc()
			log.Info().Str("event", "lease_not_acquired").Dur("remaining", remaining).Msg("resource busy")
			return s.bounce(tc.Type, "lease_not_acquired", 0, errors.New("resource lease held by another worker"))
		case "applied":
			s.Stats.AlreadyApplied.Add(1)
			s.m.alreadyApplied.WithLabelValues(tc.Type).Inc()
			s.m.transitions.WithLabelValues(tc.Type, "done").Inc()
			log.Info().Str("event", "already_applied").Msg("operation applied before; job done")
			return nil
		case "exhausted":
			s.Stats.Failed.Add(1)
			s.m.deadLettered.WithLabelValues(tc.Type).Inc()
			s.m.transitions.WithLabelValues(tc.Type, "failed").Inc()
			log.Warn().Str("event", "failed").Msg("attempt budget spent")
			return fmt.Errorf("attempt budget spent: %w", asynq.SkipRetry)
		}
		token, _ := res[1].(int64)
		attempt, _ := res[2].(int64)
		job := &Job{
			ID: jobID, Type: tc.Type, Queue: tc.Queue, Delivery: delivery, Payload: []byte(res[3].(string)),
			Attempt: int(attempt), MaxAttempts: tc.MaxAttempts, OpKey: opKey, Headers: t.Headers(),
			s: s, keys: keys, tc: tc,
		}
		if cp := res[4].(string); cp != "" {
			job.Checkpoint = []byte(cp)
		}
		created, _ := res[5].(int64)
		job.CreatedAt = time.UnixMilli(created)
		job.lease = s.locks.Granted(keys.tag, owner, token, tc.LeaseTTL, sent)
		job.lease.StampHeartbeat(keys.record, "heartbeat_at")
		log = log.With().Int("attempt", job.Attempt).Str("lease_owner", owner).Int64("fencing_token", token).Logger()
		span.SetAttributes(attribute.Int("jobguard.attempt", job.Attempt), attribute.Int64("jobguard.fencing_token", token))
		s.Stats.Started.Add(1)
		s.m.lease.WithLabelValues(tc.Type, "acquired").Inc()
		s.m.transitions.WithLabelValues(tc.Type, "processing").Inc()
		if job.Attempt == 1 && created > 0 {
			s.m.queueWait.WithLabelValues(tc.Type).Observe(seconds(sent.Sub(job.CreatedAt)))
		}
		runStart := time.Now()

		s.wg.Add(1)
		defer s.wg.Done()
		s.track(job, ctx)
		defer s.untrack(job)
		hctx, stop := s.keeper.Keep(ctx, job.lease)
		herr := s.call(hctx, job, r.handler, log)
		stop()
		err = s.conclude(ctx, hctx, job, herr, log)
		span.SetAttributes(attribute.String("jobguard.outcome", outcomeOf(err)))
		s.m.duration.WithLabelValues(tc.Type, outcomeOf(err)).Observe(seconds(time.Since(runStart)))
		return err
	}
}

// unconfirmedWaits are the pauses before a delivery that found its job unconfirmed asks again.
var unconfirmedWaits = []time.Duration{5 * time.Millisecond, 20 * time.Millisecond, 75 * time.Millisecond}

func (s *Stack) track(j *Job, ctx context.Context) {
	s.mu.Lock()
	s.running[j] = ctx
	s.mu.Unlock()
}

func (s *Stack) untrack(j *Job) {
	s.mu.Lock()
	delete(s.running, j)
	s.mu.Unlock()
}

// call runs the handler, turning a panic into an error that carries the stack.
func (s *Stack) call(ctx context.Context, job *Job, h Handler, log zerolog.Logger) (err error) {
	defer func() {
		if p := recover(); p != nil {
			s.Stats.Panics.Add(1)
			log.Error().Str("event", "panic").Str("panic", redact.String(fmt.Sprint(p))).Bytes("stack", debug.Stack()).Msg("handler panicked")
			err = fmt.Errorf("panic: %v", p) // redacted by conclude
		}
	}()
	return h(ctx, job)
}

// outcome is what the finish script writes and what asynq is told.
type outcome struct {
	status, event, detail string
	refund                bool
}

// conclude decides the job's outcome from the handler's error and writes it.
func (s *Stack) conclude(ctx, hctx context.Context, job *Job, herr error, log zerolog.Logger) error {
	tc := job.tc
	if cause := context.Cause(hctx); errors.Is(cause, locking.ErrLeaseLost) {
		// Nothing more is written under this token; the job is another delivery's now, or will be.
		// The timeline still says why this run stopped: events are forensics, not state.
		s.Stats.LeaseLost.Add(1)
		s.m.lease.WithLabelValues(tc.Type, "lost").Inc()
		f := job.lease.Fence()
		lost := Event{Event: "lease_lost", Delivery: job.Delivery, Token: f.Token, Attempt: job.Attempt, Detail: cause.Error()}
		if errors.Is(cause, locking.ErrRenewFailed) {
			s.m.lease.WithLabelValues(tc.Type, "renew_failed").Inc()
			log.Warn().Str("event", "lease_renew_failed").Err(cause).Msg("lease renewal failed")
			failed := lost
			failed.Event = "lease_renew_failed"
			s.event(ctx, job.keys, failed, lost)
		} else {
			s.event(ctx, job.keys, lost)
		}
		log.Warn().Str("event", "lease_lost").Err(cause).Msg("lease lost; handler stopped")
		return s.bounce(tc.Type, "lease_lost", 0, cause)
	}
	if herr == nil {
		s.Stats.Succeeded.Add(1)
		if err := s.finish(ctx, job, outcome{status: "done"}, log); err != nil {
			return err
		}
		log.Info().Str("event", "done").Msg("job done")
		return nil
	}
	if ctx.Err() != nil && s.stopping.Load() {
		s.Stats.Requeued.Add(1)
		_ = s.finish(ctx, job, outcome{status: "queued", event: "requeued", detail: "shutdown", refund: true}, log)
		log.Info().Str("event", "requeued").Msg("shutdown: job requeued")
		return s.bounce(tc.Type, "shutdown", 0, context.Cause(ctx))
	}
	// A handler's error may quote a URL with credentials (net/http's *url.Error does): scrub it
	// before it reaches the record, the timeline, the log and asynq's stored error.
	herr = redact.Error(herr)
	class, retryAfter := classOf(herr)
	msg := herr.Error()
	switch class {
	case classRevoked:
		s.Stats.Revoked.Add(1)
		_ = s.finish(ctx, job, outcome{status: "revoked", detail: msg}, log)
		log.Info().Str("event", "revoked").Str("reason", msg).Msg("job revoked")
		return fmt.Errorf("%s: %w", msg, asynq.RevokeTask)
	case classPermanent:
		s.Stats.Failed.Add(1)
		s.m.deadLettered.WithLabelValues(tc.Type).Inc()
		_ = s.finish(ctx, job, outcome{status: "failed", detail: msg}, log)
		log.Warn().Str("event", "failed").Str("error", msg).Msg("permanent error: dead letter")
		return fmt.Errorf("%s: %w", msg, asynq.SkipRetry)
	case classRateLimited:
		if job.age() < tc.RateLimitMaxAge {
			_ = s.finish(ctx, job, outcome{status: "retrying", event: "rate_limited", detail: msg, refund: true}, log)
			log.Info().Str("event", "bounced").Str("reason", "rate_limited").Dur("retry_after", retryAfter).Msg("rate limited")
			return s.bounce(tc.Type, "rate_limited", retryAfter, herr)
		}
	}
	if job.Attempt >= tc.MaxAttempts {
		s.Stats.Failed.Add(1)
		s.m.deadLettered.WithLabelValues(tc.Type).Inc()
		_ = s.finish(ctx, job, outcome{status: "failed", detail: msg}, log)
		log.Warn().Str("event", "failed").Str("error", msg).Msg("attempt budget spent: dead letter")
		return fmt.Errorf("%s: %w", msg, asynq.SkipRetry)
	}
	s.rngMu.Lock()
	delay := tc.Backoff.Delay(job.Attempt, s.rng)
	s.rngMu.Unlock()
	s.Stats.Retried.Add(1)
	s.m.retries.WithLabelValues(tc.Type, classNames[class]).Inc()
	_ = s.finish(ctx, job, outcome{status: "retrying", detail: msg, event: "retry_scheduled"}, log)
	log.Info().Str("event", "retry_scheduled").Str("error", msg).Dur("delay", delay).Msg("retry scheduled")
	return &delayed{delay: delay, err: herr}
}

// finish writes the outcome with the job's fence, in one round trip, on a context that survives
// the delivery's (shutdown, timeout) for at most 5 s.
func (s *Stack) finish(ctx context.Context, job *Job, o outcome, log zerolog.Logger) (err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	ctx, span := scriptSpan(ctx, "jobguard.finish")
	defer func() { endSpan(span, err) }()
	f := job.lease.Fence()
	res, err := finishScript.Run(ctx, s.rdb,
		[]string{job.keys.record, job.keys.lease, job.keys.timeline, job.keys.applied, job.keys.marker},
		f.Token, f.Owner, o.status, time.Now().UnixMilli(), errText(o), job.result, ms(s.cfg.Retention), s.cfg.TimelineCap,
		bit(job.OpKey != ""), ms(job.tc.AppliedTTL), job.Delivery, o.detail, s.cfg.WorkerID, o.event, bit(o.refund),
		bit(job.keys.clear == "done"),
	).Slice()
	if err != nil {
		log.Error().Err(err).Str("status", o.status).Msg("finish script failed")
		return s.bounce(job.Type, "finish_failed", 0, fmt.Errorf("finish script: %w", err))
	}
	switch res[0].(string) {
	case "ok":
		s.m.transitions.WithLabelValues(job.Type, o.status).Inc()
	case "stale":
		s.Stats.StaleWrites.Add(1)
		s.m.staleWrites.WithLabelValues(job.Type).Inc()
		log.Warn().Str("event", "stale_write_rejected").Interface("current_token", res[1]).Msg("a newer token owns the job")
	case "invalid":
		s.Stats.InvalidTransitions.Add(1)
		s.m.invalid.WithLabelValues(job.Type).Inc()
		log.Warn().Str("event", "invalid_transition").Interface("status", res[1]).Str("to", o.status).Msg("transition rejected")
	}
	return nil
}

// traceID is the span's trace id for logs, "" when tracing is off.
func traceID(span trace.Span) string {
	if sc := span.SpanContext(); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return ""
}

// outcomeOf names what asynq was told, for the run duration histogram.
func outcomeOf(err error) string {
	var d *delayed
	switch {
	case err == nil:
		return "done"
	case errors.Is(err, ErrBounced):
		return "bounced"
	case errors.As(err, &d):
		return "retry"
	case errors.Is(err, asynq.RevokeTask):
		return "revoked"
	default:
		return "failed"
	}
}

func errText(o outcome) string {
	if o.status == "done" {
		return ""
	}
	return o.detail
}

// event appends timeline events without changing status (bounces, lost leases), stamped with this
// worker and the current time. Best effort: the timeline is forensics, never state.
func (s *Stack) event(ctx context.Context, k jobKeys, events ...Event) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	pipe := s.rdb.Pipeline()
	s.queueEvents(wctx, pipe, k, events...)
	_, _ = pipe.Exec(wctx)
}

// queueEvents adds the append of events to pipe. Eval (not EvalSha) keeps the pipeline free of
// NOSCRIPT retries.
func (s *Stack) queueEvents(ctx context.Context, pipe redis.Pipeliner, k jobKeys, events ...Event) {
	args := []any{s.cfg.TimelineCap, ms(s.cfg.Retention)}
	now := time.Now().UnixMilli()
	for _, e := range events {
		e.At, e.Worker = now, s.cfg.WorkerID
		b, _ := json.Marshal(e)
		args = append(args, string(b))
	}
	eventScript.Eval(ctx, pipe, []string{k.timeline, k.record}, args...)
}

func bit(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func ms(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return max(d.Milliseconds(), 1)
}
