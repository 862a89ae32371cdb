package middleware

import "github.com/prometheus/client_golang/prometheus"

// metrics are the lease level's series; the job level's are the engine's (jobguard_*).
type metrics struct {
	outcomes  *prometheus.CounterVec
	rescues   *prometheus.CounterVec
	unadopted *prometheus.CounterVec
}

func newMetrics() *metrics {
	return &metrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobguard_lease_runs_total",
			Help: "Lease-level deliveries by outcome (done, retried, failed, revoked, bounced, lease_lost, slot_lost, superseded, stale_copy, invalid).",
		}, []string{"type", "outcome"}),
		rescues: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobguard_lease_rescues_total",
			Help: "Lease-level tasks of dead or paused workers handed to a copy.",
		}, []string{"type"}),
		unadopted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobguard_unadopted_total",
			Help: "Job-level tasks that arrived without a job (a plain asynq enqueue) and ran at lease level.",
		}, []string{"type"}),
	}
}

func (m *metrics) initType(typ string) {
	m.rescues.WithLabelValues(typ)
	m.unadopted.WithLabelValues(typ)
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.outcomes, m.rescues, m.unadopted}
}
