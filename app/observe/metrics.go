package observe

import (
	"context"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// queueCollector reports asynq's queues at scrape time. Besides jobguard's own gauges it exports
// the names asynq's metrics exporter uses (asynq_queue_size, asynq_queue_latency_seconds,
// asynq_queue_memory_usage_approx_bytes, asynq_tasks_processed_total, asynq_tasks_failed_total),
// so asynqmon's charts work when it is given a Prometheus that scrapes jobguard.
type queueCollector struct {
	insp *asynq.Inspector
	// ping tells whether Redis answers before asking asynq's inspector, whose calls carry no
	// deadline: with Redis down a scrape answers at once, with jobguard_redis_up 0.
	ping                              func(context.Context) error
	up, tasks, paused                 *prometheus.Desc
	size, latency, memory, proc, fail *prometheus.Desc
}

func newQueueCollector(insp *asynq.Inspector, ping func(context.Context) error) *queueCollector {
	q := []string{"queue"}
	return &queueCollector{
		insp:    insp,
		ping:    ping,
		up:      prometheus.NewDesc("jobguard_redis_up", "1 when Redis answered the scrape's ping within 500 ms.", nil, nil),
		tasks:   prometheus.NewDesc("jobguard_asynq_queue_tasks", "asynq tasks per queue and state.", []string{"queue", "state"}, nil),
		paused:  prometheus.NewDesc("jobguard_asynq_queue_paused", "1 when the queue is paused.", q, nil),
		size:    prometheus.NewDesc("asynq_queue_size", "Tasks in the queue, all states.", q, nil),
		latency: prometheus.NewDesc("asynq_queue_latency_seconds", "Age of the oldest pending task.", q, nil),
		memory:  prometheus.NewDesc("asynq_queue_memory_usage_approx_bytes", "Approximate memory the queue uses in Redis.", q, nil),
		proc:    prometheus.NewDesc("asynq_tasks_processed_total", "Tasks processed (succeeded or failed) from the queue.", q, nil),
		fail:    prometheus.NewDesc("asynq_tasks_failed_total", "Tasks that failed from the queue.", q, nil),
	}
}

func (q *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{q.up, q.tasks, q.paused, q.size, q.latency, q.memory, q.proc, q.fail} {
		ch <- d
	}
}

// scrapePing bounds the check that Redis answers before the queues are read.
const scrapePing = 500 * time.Millisecond

func (q *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapePing)
	err := q.ping(ctx)
	cancel()
	if err != nil {
		ch <- prometheus.MustNewConstMetric(q.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(q.up, prometheus.GaugeValue, 1)
	queues, err := q.insp.Queues()
	if err != nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, name := range queues {
		info, err := q.insp.GetQueueInfo(name)
		if err != nil {
			continue
		}
		for state, n := range map[string]int{"pending": info.Pending, "active": info.Active, "scheduled": info.Scheduled,
			"retry": info.Retry, "archived": info.Archived, "completed": info.Completed, "aggregating": info.Aggregating} {
			gauge(q.tasks, float64(n), name, state)
		}
		paused := 0.0
		if info.Paused {
			paused = 1
		}
		gauge(q.paused, paused, name)
		gauge(q.size, float64(info.Size), name)
		gauge(q.latency, info.Latency.Seconds(), name)
		gauge(q.memory, float64(info.MemoryUsage), name)
		ch <- prometheus.MustNewConstMetric(q.proc, prometheus.CounterValue, float64(info.ProcessedTotal), name)
		ch <- prometheus.MustNewConstMetric(q.fail, prometheus.CounterValue, float64(info.FailedTotal), name)
	}
}

// NewRegistry gathers the process's metrics: Go runtime and process, asynq's queues (read through
// insp once ping answers), and own: the HTTP server's, the job engine's, the scheduler's.
func NewRegistry(own []prometheus.Collector, insp *asynq.Inspector, ping func(context.Context) error) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newQueueCollector(insp, ping))
	reg.MustRegister(own...)
	return reg
}
