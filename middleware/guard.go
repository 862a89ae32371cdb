package middleware

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/locking"
)

// Guard protects the task types it was told about (Protect), on one Redis. Its Middleware wraps
// an application's own handlers; ServerConfig chains the application's retry policy; Run keeps
// the background loops; Enqueue, Cancel and Status serve producers and operators of job-level
// types. A Guard is safe for concurrent use.
type Guard struct {
	cfg    Config
	rdb    redis.UniversalClient
	stack  *engine.Stack
	locks  *locking.Client
	keeper *locking.Keeper
	client *asynq.Client
	// enqueuer is Enqueue's client: concurrent enqueues share pipelines (engine.Stack.EnqueueClient).
	enqueuer *asynq.Client
	log      zerolog.Logger
	m        *metrics

	mu     sync.RWMutex
	leases map[string]Lease
	jobs   map[string]Job
	served []string // the queues of the server configs ServerConfig built
	// unstarted notes the active tasks no live asynq server lists (lease_unstarted.go).
	unstarted *engine.UnstartedWatch
	// finishing counts the lease finishes sent and not yet answered (lease_finish_later.go).
	finishing sync.WaitGroup
}

// New returns a guard on rdb (a *redis.Client, a Sentinel failover client or a cluster client).
// Close releases what it holds.
func New(rdb redis.UniversalClient, cfg Config) *Guard {
	cfg = cfg.withDefaults()
	stack := engine.New(rdb, engine.Config{
		Prefix: cfg.Prefix, WorkerID: cfg.WorkerID, Concurrency: cfg.Concurrency, LeaseTTL: cfg.LeaseTTL,
		Retention: cfg.Retention, Logger: cfg.Logger, Clock: cfg.Clock, Keys: cfg.Keys.ring(),
		DurableReplicas: cfg.DurableReplicas, DurableTimeout: cfg.DurableTimeout,
		FairMetricKeys: cfg.FairMetricKeys,
	})
	locks := stack.Locks()
	g := &Guard{
		cfg: cfg, rdb: rdb, stack: stack, locks: locks, keeper: locks.NewKeeper(),
		client: asynq.NewClientFromRedisClient(rdb), enqueuer: stack.EnqueueClient(), log: *cfg.Logger,
		leases: map[string]Lease{}, jobs: map[string]Job{}, unstarted: engine.NewUnstartedWatch(cmp.Or(cfg.Clock, locking.SystemClock)),
	}
	g.m = newMetrics()
	if cfg.Registerer != nil {
		for _, c := range g.Collectors() {
			cfg.Registerer.MustRegister(c)
		}
	}
	return g
}

// ProtectLease protects task type typ at lease level. Protecting a type twice, with no
// Resource, or with a limit Redis cannot keep (negative, or more than one start per millisecond)
// panics (a wiring mistake, found at start).
func (g *Guard) ProtectLease(typ string, l Lease) {
	if l.Resource == nil {
		panic(fmt.Sprintf("middleware: lease-level type %q needs a Resource", typ))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.claimType(typ)
	if l.TTL <= 0 {
		l.TTL = g.cfg.LeaseTTL
	}
	if l.TTL < minLeaseTTL {
		panic(fmt.Sprintf("middleware: lease-level type %q: TTL %v is under %v (a unit slip?)", typ, l.TTL, minLeaseTTL))
	}
	if l.OpKey == nil && l.AppliedTTL == 0 {
		// The default op key is the task id, which no delivery presents once the task is gone: its
		// applied records need not outlive the job records' retention.
		l.AppliedTTL = g.retention()
	}
	if l.Limit.on() || l.Limit.Concurrency < 0 || l.Limit.Rate < 0 {
		g.stack.RegisterLimit(typ, l.Limit.engine())
	}
	g.leases[typ] = l
	g.m.initType(typ)
}

// minLeaseTTL is the shortest lease the keeper can hold: it renews a third of the way through.
const minLeaseTTL = 10 * time.Millisecond

// ProtectJob protects task type typ at job level. Protecting a type twice, or an encrypted type
// (Job.Encrypt) on a guard without Config.Keys, panics.
func (g *Guard) ProtectJob(typ string, j Job) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.claimType(typ)
	g.jobs[typ] = j
	g.stack.Register(engine.TaskConfig{
		Type: typ, Queue: j.Queue, MaxAttempts: j.MaxAttempts, Timeout: j.Timeout, LeaseTTL: j.LeaseTTL,
		Backoff: engine.Backoff{Base: j.BackoffBase, Max: j.BackoffMax}, AppliedTTL: j.AppliedTTL,
		StartWithin: j.StartWithin, Limit: j.Limit.engine(), Fair: j.Fair.engine(), Encrypt: j.Encrypt,
	}, nil)
	g.m.initType(typ)
}

func (g *Guard) claimType(typ string) {
	_, lease := g.leases[typ]
	_, job := g.jobs[typ]
	if typ == "" || lease || job {
		panic(fmt.Sprintf("middleware: task type %q protected twice or empty", typ))
	}
}

// level is how typ is protected: "lease", "job" or "" (not at all).
func (g *Guard) level(typ string) (string, Lease, Job) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if l, ok := g.leases[typ]; ok {
		return "lease", l, Job{}
	}
	if j, ok := g.jobs[typ]; ok {
		return "job", Lease{}, j
	}
	return "", Lease{}, Job{}
}

// Collectors are the guard's Prometheus collectors, for an application that registers them itself
// (Config.Registerer does it for the others).
func (g *Guard) Collectors() []prometheus.Collector {
	return append(g.stack.Collectors(), g.m.collectors()...)
}

// BeginShutdown says the asynq server is stopping: call it right before srv.Shutdown. Job-level
// runs cancelled from then on (asynq's ShutdownTimeout) are requeued with their attempt given back
// instead of counted as failures.
func (g *Guard) BeginShutdown() { g.stack.BeginShutdown() }

// Locks is the guard's locking client (same prefix), for fenced writes of the application's own.
func (g *Guard) Locks() *locking.Client { return g.locks }

// Close waits for the lease finishes on their way (a few milliseconds; at most 5 s when Redis
// does not answer), stops renewing leases (those of handlers still running lapse within their
// TTL) and closes the guard's asynq client. The Redis client is the caller's. Call it after the
// asynq server's Shutdown and before closing the Redis client: a process that exits without it
// may leave its last runs' leases to lapse within their TTL rather than released.
func (g *Guard) Close() error {
	g.finishing.Wait()
	g.keeper.Close()
	g.stack.Close()
	return g.client.Close()
}

func (l Limit) engine() engine.Limit {
	el := engine.Limit{Concurrency: l.Concurrency, Rate: l.Rate, Per: l.Per, Burst: l.Burst}
	if l.Key != nil {
		key := l.Key
		el.Key = func(s engine.Spec) string { return key(optionsOf(s)) }
	}
	return el
}

// servedQueues are the queues of the asynq servers this guard configured (ServerConfig): the
// rescuers walk them besides the inspector's, which lists none after Redis restarted empty.
func (g *Guard) servedQueues() []string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return append([]string(nil), g.served...)
}

// serve records the queues of a server config ServerConfig built.
func (g *Guard) serve(queues map[string]int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, q := range engine.ServedQueues(queues) {
		if !slices.Contains(g.served, q) {
			g.served = append(g.served, q)
		}
	}
}
