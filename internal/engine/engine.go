package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/locking"
)

// Stack protects the handlers of registered task types. Order of the layers around a handler:
// slot (bounded concurrency) -> start script (stale-delivery check, lease + fence, attempt, status,
// already-applied, checkpoint) -> heartbeat (keeper) -> panic recovery -> handler -> finish script
// (status, idempotency commit, release) -> retry decision for asynq.
type Stack struct {
	cfg    Config
	rdb    redis.UniversalClient
	locks  *locking.Client
	store  *jobstore.Store
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
	// onEnd is told of every job this process ends (OnEnd).
	onEnd atomic.Pointer[func(string)]
	// onCancelRunning raises the fences outside Redis of a cancelled run (OnCancelRunning).
	onCancelRunning atomic.Pointer[CancelHook]
	// untaken holds when a delivery was first seen before its record took it (a replay's, a
	// rescue's), for at most untakenForget (untakenFor).
	untaken sync.Map
	// limits keeps the limit slots this process holds (limits.go).
	limits *limiter
	// unindex holds the jobs that ended for good, for the sweep to take out of the expiry index.
	unindex unindexQueue
	// fairEnds holds the ends of fairly dispatched jobs for the next batch (fair_ends.go).
	fairEnds fairEnds
	// parked pumps the rate-limited fair types' parked keys (fair_parked.go).
	parked parkedPumps
	// unknown settles the workflows whose decision's answer was lost (workflow_confirm.go).
	unknown unknownWorkflows
	// fairHandlers spaces the counts of the live handlers (fair_capacity.go).
	fairHandlers fairHandlersClock
	// fairLayouts are the fair types whose layout this process recorded (fair_shards.go).
	fairLayouts sync.Map
	// shards spreads the deliveries of sharded queues (shards.go).
	shards shardTable
	// wfClient delivers the workflows' released nodes (workflow_advance.go); bulkClient a bulk's
	// and a workflow's roots, its enqueues sent in shared pipelines (jobstore.Store.Batched).
	wfClient, bulkClient *asynq.Client
	Stats                Stats
	m                    *metrics
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
	cfg = cfg.WithDefaults()
	locks := locking.New(rdb, locking.WithPrefix(cfg.Prefix), locking.WithOwnerPrefix(cfg.WorkerID))
	store := jobstore.New(rdb, locks, jobstore.Config{Retention: cfg.Retention, TimelineCap: cfg.TimelineCap, WorkerID: cfg.WorkerID,
		Durability: cfg.durability()})
	s := &Stack{
		cfg: cfg, rdb: rdb, locks: locks, store: store, keeper: locks.NewKeeper(), log: *cfg.Logger,
		sema: make(chan struct{}, cfg.Concurrency), types: map[string]registered{}, running: map[*Job]context.Context{},
		rng:     rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		parked:  parkedPumps{stop: make(chan struct{})},
		unknown: unknownWorkflows{stop: make(chan struct{})},
	}
	s.limits = newLimiter(s)
	s.m = newMetrics(s)
	s.wfClient = asynq.NewClientFromRedisClient(rdb)
	s.bulkClient = asynq.NewClientFromRedisClient(store.Batched())
	return s
}

// Locks is the stack's locking client (same prefix), for task handlers and the API.
func (s *Stack) Locks() *locking.Client { return s.locks }

// EnqueueClient is an asynq client on the stack's Redis whose enqueues share pipelines with
// concurrent ones (group commit; on a cluster each goes alone): the client for Enqueue when many
// callers enqueue at once.
func (s *Stack) EnqueueClient() *asynq.Client { return s.bulkClient }

// WorkerID names this process (Config.WorkerID) in records, timelines, logs and lease owners.
func (s *Stack) WorkerID() string { return s.cfg.WorkerID }

// Store is the stack's job store.
func (s *Stack) Store() *jobstore.Store { return s.store }

// SyncClock measures Redis's clock against this process's (see jobstore.Store.SyncClock).
func (s *Stack) SyncClock(ctx context.Context) error { return s.store.SyncClock(ctx) }

// ClockOffset is Redis's clock minus this process's, as SyncClock measured it.
func (s *Stack) ClockOffset() time.Duration { return s.store.ClockOffset() }

// WriteDeadline is ctx's deadline in Redis's clock, for scripts that must write nothing past it.
func (s *Stack) WriteDeadline(ctx context.Context) int64 { return s.store.WriteDeadline(ctx) }

func (s *Stack) now() time.Time { return s.cfg.Clock.Now() }

// Register adds a task type and its handler. Registering the same type twice, or an encrypted
// type on a stack without keys, panics (a wiring mistake, found at start).
func (s *Stack) Register(tc TaskConfig, h Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.types[tc.Type]; dup || tc.Type == "" {
		panic(fmt.Sprintf("engine: task type %q registered twice or empty", tc.Type))
	}
	if tc.Encrypt && s.cfg.Keys.Current() == "" {
		panic(fmt.Sprintf("engine: task type %q is encrypted and the stack has no keys (Config.Keys)", tc.Type))
	}
	s.types[tc.Type] = registered{cfg: tc.withDefaults(s.cfg), handler: h}
	s.m.initSeries(tc.Type)
	s.limits.register(s.types[tc.Type].cfg)
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
// failure test, the 1 s scheduling tick that is the floor of bounce and retry delays, and, when
// unset, FairTaskCheckInterval if a registered type is dispatched fairly (register first).
func (s *Stack) ServerConfig(c asynq.Config) asynq.Config {
	c.RetryDelayFunc = RetryDelay
	c.IsFailure = IsFailure
	c.DelayedTaskCheckInterval = minDelay
	if c.Concurrency == 0 {
		c.Concurrency = s.cfg.Concurrency
	}
	if c.TaskCheckInterval == 0 && s.HasFairTypes() {
		c.TaskCheckInterval = FairTaskCheckInterval
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
func (s *Stack) Close() {
	s.fairEnds.wg.Wait() // the ends already queued are freed: the next jobs need not wait for the sweep
	s.closeParkedPumps()
	s.unknown.close()
	s.keeper.Close()
	s.limits.close()
}

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

// SetConcurrency sets the most handlers the stack runs at once, zombies included: the asynq
// server's Concurrency, when it was not known at New. Call it before the server starts.
func (s *Stack) SetConcurrency(n int) {
	if n > 0 {
		s.sema = make(chan struct{}, n)
	}
}
