package engine

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// metrics are the stack's Prometheus collectors. Labels are bounded: task type, status, reason,
// class, policy; never a job or tenant id.
type metrics struct {
	transitions     *prometheus.CounterVec
	duration        *prometheus.HistogramVec
	queueWait       *prometheus.HistogramVec
	lease           *prometheus.CounterVec
	staleWrites     *prometheus.CounterVec
	invalid         *prometheus.CounterVec
	staleDeliveries *prometheus.CounterVec
	retries         *prometheus.CounterVec
	bounces         *prometheus.CounterVec
	deadLettered    *prometheus.CounterVec
	alreadyApplied  *prometheus.CounterVec
	dedup           *prometheus.CounterVec
	rescues         *prometheus.CounterVec
	rescueLatency   prometheus.Histogram
	reconciled      *prometheus.CounterVec
	expired         *prometheus.CounterVec
	undecryptable   *prometheus.CounterVec
	running, zombie prometheus.GaugeFunc
	fairAdmitted    *prometheus.CounterVec
	fair            *fairCollector
}

func newMetrics(s *Stack) *metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "jobguard", Name: name, Help: help}, labels)
	}
	return &metrics{
		transitions: counter("job_transitions_total", "Job status changes written, by task type and new status.", "type", "status"),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "jobguard", Name: "job_run_duration_seconds",
			Help: "Duration of handler runs, by task type and outcome.", Buckets: prometheus.ExponentialBuckets(0.005, 3, 10)}, []string{"type", "outcome"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "jobguard", Name: "job_queue_wait_seconds",
			Help: "Time from a job's creation to its first run, by task type.", Buckets: prometheus.ExponentialBuckets(0.01, 3, 10)}, []string{"type"}),
		lease:           counter("lease_events_total", "Lease events by task type: acquired, not_acquired, lost, renew_failed (also counted as lost).", "type", "event"),
		staleWrites:     counter("stale_writes_rejected_total", "Writes rejected because a newer fencing token wrote first, by task type.", "type"),
		invalid:         counter("invalid_transitions_total", "Status transitions rejected as not allowed, by task type.", "type"),
		staleDeliveries: counter("stale_deliveries_total", "Deliveries acknowledged without running: job terminal, gone, or delivery not current.", "type"),
		retries:         counter("retries_total", "Failed runs that will be retried, by task type and error class.", "type", "class"),
		bounces:         counter("bounces_total", "Deliveries sent back without spending an attempt, by task type and reason.", "type", "reason"),
		deadLettered:    counter("dead_lettered_total", "Jobs that failed for good (asynq archive), by task type.", "type"),
		alreadyApplied:  counter("idempotent_skips_total", "Jobs whose operation was applied before, so the handler did not run, by task type.", "type"),
		dedup:           counter("dedup_hits_total", "Requests covered by an existing job, by task type, policy and result.", "type", "policy", "result"),
		rescues:         counter("rescues_total", "Jobs of lost workers redelivered (or failed when out of attempts), by task type and outcome.", "type", "outcome"),
		expired:         counter("jobs_expired_total", "Jobs that ended expired instead of running late or vanishing, by task type and reason (start_by, retention).", "type", "reason"),
		undecryptable:   counter("undecryptable_total", "Runs whose payload or checkpoint did not decrypt with the configured keys (the job failed for good), by task type.", "type"),
		reconciled:      counter("reconcile_repairs_total", "Drift between job records and asynq's deliveries repaired by the reconciler, by task type and kind (redelivered, unarchived, orphan, dropped).", "type", "kind"),
		fairAdmitted:    counter("fair_admissions_total", "Jobs of fairly dispatched types admitted into asynq, by task type.", "type"),
		fair:            newFairCollector(s),
		rescueLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "jobguard", Name: "rescue_latency_seconds",
			Help: "Time from a lost run's lease lapse to its job's new delivery.", Buckets: prometheus.ExponentialBuckets(0.1, 2, 10)}),
		running: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "jobguard", Name: "running_handlers",
			Help: "Handlers running in this process, zombies included."}, func() float64 { return float64(s.Running()) }),
		zombie: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "jobguard", Name: "zombie_handlers",
			Help: "Running handlers asynq gave up on (timeout, shutdown) that have not returned; they hold a slot."}, func() float64 { return float64(s.Zombies()) }),
	}
}

// Collectors are the stack's metrics, for the process's Prometheus registry.
func (s *Stack) Collectors() []prometheus.Collector {
	m := s.m
	return []prometheus.Collector{m.transitions, m.duration, m.queueWait, m.lease, m.staleWrites, m.invalid,
		m.staleDeliveries, m.retries, m.bounces, m.deadLettered, m.alreadyApplied, m.dedup, m.rescues, m.reconciled,
		m.rescueLatency, m.running, m.zombie, m.expired, m.undecryptable, m.fairAdmitted, m.fair, s.limits.limits, s.limits.usage, s.limits.waits}
}

// The values each label takes, in one place. initSeries makes every series they span exist at zero
// when a task type is registered, so a dashboard's increase() sees the first event;
// TestEveryLabelValueIsKnown fails when code uses a value missing here.
var (
	// jobStatuses are the statuses a transition writes: every status of the store.
	jobStatuses = statusNames()
	// runOutcomes are outcomeOf's answers.
	runOutcomes   = []string{"done", "retry", "failed", "revoked", "bounced"}
	leaseEvents   = []string{"acquired", "not_acquired", "lost", "renew_failed"}
	bounceReasons = []string{"no_slot", "cancelled", "start_failed", "unconfirmed", "untaken", "debounce",
		"lease_not_acquired", "lease_lost", "shutdown", "rate_limited", "finish_failed", "limit_full", "limit_rate", "slot_lost", "not_durable", "held"}
	// dedupResults are the results each policy can count; only replace replaces.
	dedupResults = map[Policy][]string{
		UntilStarted: {"deduplicated"}, UntilDone: {"deduplicated"}, Throttle: {"deduplicated"},
		Replace: {"deduplicated", "replaced"},
	}
	rescueOutcomes = []string{"rescued", "failed"}
	expiredReasons = []string{jobstore.ExpiredStartBy, jobstore.ExpiredRetention}
)

// initSeries creates every known series of task type typ at zero.
func (m *metrics) initSeries(typ string) {
	for _, c := range []*prometheus.CounterVec{m.staleWrites, m.invalid, m.staleDeliveries, m.deadLettered, m.alreadyApplied, m.undecryptable, m.fairAdmitted} {
		c.WithLabelValues(typ)
	}
	m.queueWait.WithLabelValues(typ)
	for _, v := range runOutcomes {
		m.duration.WithLabelValues(typ, v)
	}
	for _, v := range classNames {
		m.retries.WithLabelValues(typ, v)
	}
	for p, results := range dedupResults {
		for _, v := range results {
			m.dedup.WithLabelValues(typ, string(p), v)
		}
	}
	for _, c := range []struct {
		vec    *prometheus.CounterVec
		values []string
	}{
		{m.transitions, jobStatuses}, {m.lease, leaseEvents}, {m.bounces, bounceReasons},
		{m.rescues, rescueOutcomes}, {m.reconciled, repairKinds}, {m.expired, expiredReasons},
	} {
		for _, v := range c.values {
			c.vec.WithLabelValues(typ, v)
		}
	}
}

var classNames = map[class]string{classTransient: "transient", classRateLimited: "rate_limited", classPermanent: "permanent", classRevoked: "revoked"}

func seconds(d time.Duration) float64 { return d.Seconds() }

func statusNames() []string {
	out := make([]string, len(jobstore.Statuses))
	for i, st := range jobstore.Statuses {
		out[i] = string(st)
	}
	return out
}
