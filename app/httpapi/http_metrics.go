package httpapi

import (
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// httpMetrics count requests by method, route pattern (never the raw path) and status.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	idem     *prometheus.CounterVec
}

// idemResults are the results countIdem counts; each series exists at zero from the start.
var idemResults = []string{"new", "replayed", "conflict", "mismatch"}

// collectors are the HTTP metrics, for the process's registry.
func (m *httpMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.duration, m.idem}
}

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
