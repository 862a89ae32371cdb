package app

import (
	"context"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// httpMetrics count requests by method, route pattern (never the raw path) and status.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	idem     *prometheus.CounterVec
}

// idemResults are the results countIdem counts; each series exists at zero from the start.
var idemResults = []string{"new", "replayed", "conflict", "mismatch"}

func newHTTPMetrics() *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "jobguard", Name: "http_requests_total",
			Help: "HTTP requests by method, route pattern and status code."}, []string{"method", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "jobguard", Name: "http_request_duration_seconds",
			Help: "HTTP request duration by method and route pattern (requests that were not read, route unparsed, are not timed).", Buckets: prometheus.DefBuckets}, []string{"method", "route"}),
		idem: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "jobguard", Name: "http_idempotency_total",
			Help: "Requests with an Idempotency-Key by result: new, replayed, conflict (in flight), mismatch (other request)."}, []string{"result"}),
	}
	for _, r := range idemResults {
		m.idem.WithLabelValues(r)
	}
	return m
}

// observe counts a request a route handled. Label values must not alias the request: a
// CounterVec keeps them, and fasthttp overwrites a connection's buffers with its next request
// (GET becoming POS breaks every later scrape with "collected before with the same name and
// label values"). The method is one of methodLabel's constants, the route the registered pattern.
func (m *httpMetrics) observe(c *fiber.Ctx, start time.Time) {
	method, route := methodLabel(c.Method()), routeLabel(c)
	m.requests.WithLabelValues(method, route, strconv.Itoa(c.Response().StatusCode())).Inc()
	m.duration.WithLabelValues(method, route).Observe(time.Since(start).Seconds())
}

// observeUnparsed counts a request that was not read (see unreadRequests); its duration is not
// known.
func (m *httpMetrics) observeUnparsed(c *fiber.Ctx, status int) {
	m.requests.WithLabelValues(methodLabel(c.Method()), routeUnparsed, strconv.Itoa(status)).Inc()
}

// routeLabel is the route pattern of the request, never its raw path.
func routeLabel(c *fiber.Ctx) string {
	if c.Locals(localUnmatched) != nil {
		return "unmatched" // the 404 fallback: keep raw paths out of the labels
	}
	return c.Route().Path // the registered pattern: the app's memory, not the request's
}

// methodOther is the method label of a method Fiber does not route.
const methodOther = "other"

// methodLabel is m as one of the constants Fiber routes (its default RequestMethods), or
// methodOther: a value that never aliases the request's buffer and a label of bounded
// cardinality.
func methodLabel(m string) string {
	for _, known := range fiber.DefaultMethods {
		if m == known {
			return known // the package's constant, not the request's bytes
		}
	}
	return methodOther
}

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

// newRegistry gathers the process's metrics: Go runtime and process, HTTP, the job engine,
// and asynq's queues.
func newRegistry(hm *httpMetrics, stack []prometheus.Collector, insp *asynq.Inspector, ping func(context.Context) error) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		hm.requests, hm.duration, hm.idem, newQueueCollector(insp, ping))
	reg.MustRegister(stack...)
	return reg
}

func metricsRoute(f *fiber.App, reg *prometheus.Registry) {
	f.Get("/metrics", adaptor.HTTPHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
}
