package schedule

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// The outcomes of a tick, the values of the outcome label.
const (
	OutcomeEnqueued       = "enqueued"
	OutcomeSkippedOverlap = "skipped_overlap"
	OutcomeMissed         = "missed"
	OutcomePaused         = "paused"
	// OutcomeReplaced counts ticks that cancelled the previous tick's job (overlap replace); the
	// tick's own job counts as enqueued too.
	OutcomeReplaced = "replaced"
)

var outcomes = []string{OutcomeEnqueued, OutcomeSkippedOverlap, OutcomeMissed, OutcomePaused, OutcomeReplaced}

// Stats are the scheduler's counters since start, over all schedules.
type Stats struct {
	// Enqueued ticks created a job here; Existed found their job created by another leader.
	Enqueued, Existed atomic.Int64
	SkippedOverlap    atomic.Int64
	Missed, Paused    atomic.Int64
	Replaced          atomic.Int64
	// LeaderChanges counts the times this process became leader.
	LeaderChanges atomic.Int64
}

type metrics struct {
	ticks   *prometheus.CounterVec
	leaders prometheus.Counter
	leading prometheus.GaugeFunc
}

func newMetrics(s *Scheduler) *metrics {
	m := &metrics{
		ticks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "jobguard", Name: "schedule_ticks_total",
			Help: "Schedule ticks dealt with by this process as leader, by schedule and outcome (enqueued, skipped_overlap, missed, paused, replaced)."},
			[]string{"schedule", "outcome"}),
		leaders: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "jobguard", Name: "schedule_leader_changes_total",
			Help: "Times this process became the scheduler's leader."}),
		leading: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "jobguard", Name: "schedule_leader",
			Help: "1 while this process is the scheduler's leader."}, func() float64 {
			if s.Leading() {
				return 1
			}
			return 0
		}),
	}
	for _, p := range s.plans {
		for _, o := range outcomes {
			m.ticks.WithLabelValues(p.Name, o)
		}
	}
	return m
}

func (s *Scheduler) count(name, outcome string, n int) {
	if n <= 0 {
		return
	}
	s.m.ticks.WithLabelValues(name, outcome).Add(float64(n))
	switch outcome {
	case OutcomeEnqueued:
		s.Stats.Enqueued.Add(int64(n))
	case OutcomeSkippedOverlap:
		s.Stats.SkippedOverlap.Add(int64(n))
	case OutcomeMissed:
		s.Stats.Missed.Add(int64(n))
	case OutcomePaused:
		s.Stats.Paused.Add(int64(n))
	case OutcomeReplaced:
		s.Stats.Replaced.Add(int64(n))
	}
}

// Collectors are the scheduler's metrics, for the process's Prometheus registry.
func (s *Scheduler) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.m.ticks, s.m.leaders, s.m.leading}
}
