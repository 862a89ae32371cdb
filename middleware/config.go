package middleware

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/locking"
)

// Config configures a Guard; the zero value of each field is its documented default.
type Config struct {
	// Prefix is put before every key jobguard writes (default "jobguard"), so several
	// applications can share one Redis. asynq's own keys are asynq's.
	Prefix string
	// WorkerID names this process in records, lease owners and logs (default host-pid).
	WorkerID string
	// Concurrency is the most job-level handlers this process runs at once, zombies included
	// (default: what ServerConfig finds in the asynq.Config, else 10).
	Concurrency int
	// LeaseTTL is the default resource lease TTL (default 30s). A dead or paused worker's task is
	// rescued about this long after its last renewal.
	LeaseTTL time.Duration
	// Retention is how long job records and timelines live after their last change (default 7 days).
	Retention time.Duration
	// RescueInterval is how often Run looks for tasks of dead or paused workers (default 2s).
	RescueInterval time.Duration
	// ReconcileInterval is how often Run compares job records with asynq's deliveries and repairs
	// what drifted (default 15s).
	ReconcileInterval time.Duration
	// OnRescuePass, when set, is called after each of Run's rescue passes with its error (nil when
	// it passed): a liveness probe can watch that the passes go on.
	OnRescuePass func(err error)
	// Logger receives one event per outcome worth an operator's attention (default: none).
	Logger *zerolog.Logger
	// Clock gives the time of every rule decided in Go (default the system clock); Redis's TTLs
	// run on Redis's own clock.
	Clock locking.Clock
	// Registerer, when set, gets the guard's Prometheus collectors.
	Registerer prometheus.Registerer
	// DurableReplicas turns on durable mode: the writes that make a promise (Enqueue's
	// confirmation, a run's start at either level, a done job's finish, Run.Apply) wait, with Redis
	// WAIT in their round trip, until this many replicas hold them; when they do not within
	// DurableTimeout the caller gets ErrNotDurable and nothing was acknowledged: Enqueue's job is
	// not to be reported as accepted, a start does not run the handler (the task comes back), an
	// Apply's effect is on the master only (return the error: the retry finds it applied). Default
	// 0: off (asynchronous replication: a failover can lose what the old master acknowledged).
	DurableReplicas int
	// DurableTimeout bounds each wait for the replicas (default 1s).
	DurableTimeout time.Duration
	// Keys encrypts the data of the job-level types marked Job.Encrypt and decrypts what any of
	// its keys encrypted (default none: protecting an encrypted type panics).
	Keys *KeyRing
	// FairMetricKeys is how many keys per fairly dispatched type the jobguard_fair_key_* gauges
	// name in a label, the top by backlog and by running jobs (default 0: none). A key is often a
	// tenant id: turn it on only where the metrics are read by operators, never by tenants.
	FairMetricKeys int
}

func (c Config) withDefaults() Config {
	// The engine's defaults are the guard's for the fields they share: one place writes each.
	e := engine.Config{Prefix: c.Prefix, WorkerID: c.WorkerID, LeaseTTL: c.LeaseTTL, Logger: c.Logger}.WithDefaults()
	c.Prefix, c.WorkerID, c.LeaseTTL, c.Logger = e.Prefix, e.WorkerID, e.LeaseTTL, e.Logger
	if c.RescueInterval <= 0 {
		c.RescueInterval = 2 * time.Second
	}
	return c
}
