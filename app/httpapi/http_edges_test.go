package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// Mixed methods and paths over several keep-alive connections at once: fasthttp reuses each
// connection's buffers for its next request, so a label kept from one (c.Method()) would change
// under the registry. /metrics must still answer 200, pass promtool, and count each method as sent.
func TestMetricsAfterMixedKeepAliveTraffic(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, nil)
	addr := strings.TrimPrefix(r.base, "http://")
	type call struct{ method, path, body string }
	calls := []call{
		{http.MethodGet, "/healthz", ""},
		{http.MethodPost, "/healthz", ""},
		{http.MethodPut, "/jobs/abc", `{}`},
		{http.MethodDelete, "/jobs/j-1", ""},
		{http.MethodHead, "/healthz", ""},
		{http.MethodOptions, "/readyz", ""},
		{http.MethodGet, "/jobs/no-such-job", ""},
		{http.MethodPost, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"r"}`},
		{http.MethodGet, "/no/such/route", ""},
		{http.MethodPatch, "/healthz", ""},
	}
	const conns, rounds = 4, 5
	var wg sync.WaitGroup
	for n := range conns {
		k := dialKeepAlive(t, addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range rounds {
				for i := range calls {
					c := calls[(i+n*3+round)%len(calls)] // each connection in its own order
					h := []string{}
					if c.body != "" {
						h = []string{"Content-Type", "application/json"}
					}
					resp, body, err := k.roundTrip(c.method, rawRequest(c.method, c.path, c.body, h...))
					if err != nil {
						t.Errorf("connection %d, %s %s: %v", n, c.method, c.path, err)
						return
					}
					if resp.StatusCode >= 500 || resp.Close {
						t.Errorf("connection %d, %s %s: %d (close %v) %s", n, c.method, c.path, resp.StatusCode, resp.Close, body)
						return
					}
				}
			}
		}()
	}
	wg.Wait()

	for range 2 { // a scrape that works once must keep working
		s := scrape(t, r)
		promtoolCheck(t, string(s))
		// The 404/405 fallback counts under one fixed route label; a route handler's 404 under its pattern.
		if got, want := s.value(t, "jobguard_http_requests_total", map[string]string{"route": "unmatched", "code": "404"}), conns*rounds; got != float64(want) {
			t.Errorf("jobguard_http_requests_total{route=unmatched,code=404} = %v, want %d", got, want)
		}
		if got, want := s.value(t, "jobguard_http_requests_total", map[string]string{"route": "unmatched", "code": "405"}), 5*conns*rounds; got != float64(want) {
			t.Errorf("jobguard_http_requests_total{route=unmatched,code=405} = %v, want %d", got, want)
		}
		if got, want := s.value(t, "jobguard_http_requests_total", map[string]string{"route": "/jobs/:id", "code": "404"}), conns*rounds; got != float64(want) {
			t.Errorf("jobguard_http_requests_total{route=/jobs/:id,code=404} = %v, want %d", got, want)
		}
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodHead, http.MethodOptions, http.MethodPatch} {
			want := 0
			for _, c := range calls {
				if c.method == m {
					want += conns * rounds
				}
			}
			if got := s.value(t, "jobguard_http_requests_total", map[string]string{"method": m}); m != http.MethodGet && got != float64(want) {
				t.Errorf("jobguard_http_requests_total{method=%q} = %v, want %d", m, got, want)
			} else if m == http.MethodGet && got < float64(want) { // and the scrapes themselves
				t.Errorf("jobguard_http_requests_total{method=GET} = %v, want at least %d", got, want)
			}
		}
	}
}

// A request fasthttp cannot parse never reaches a handler: Fiber calls the error handler with the
// parser's message, which quotes the raw request headers. The answer must be a fixed problem+json
// with a request id, and the request must still get its access-log line and its metric; the
// bearer token appears nowhere. Not parallel: NewLogger sets zerolog's global time format, which
// the loggers of apps running in parallel tests read (a race the detector reports).
func TestMalformedRequestsGetASafeProblem(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-bearer-0123456789"
	var logs syncBuffer
	r := startWithLogs(t, RoleAPI, map[string]string{"BODY_LIMIT": "1024", "API_TOKENS": secret + ":t1"}, &logs)
	addr := strings.TrimPrefix(r.base, "http://")
	auth := "Authorization: Bearer " + secret + "\r\n"
	cases := []struct {
		name, raw string
		status    int
	}{
		{"negative Content-Length", "POST /jobs/rebuild-cache HTTP/1.1\r\nHost: h\r\n" + auth +
			"Content-Type: application/json\r\nContent-Length: -1\r\n\r\n", http.StatusBadRequest},
		{"broken request line", "GET\r\nHost: h\r\n" + auth + "\r\n", http.StatusBadRequest},
		{"header over the read buffer", "GET /healthz HTTP/1.1\r\nHost: h\r\n" + auth +
			"X-Pad: " + strings.Repeat("p", 4500) + "\r\n\r\n", http.StatusRequestHeaderFieldsTooLarge},
		{"body over BODY_LIMIT", "POST /jobs/rebuild-cache HTTP/1.1\r\nHost: h\r\n" + auth +
			"Content-Type: application/json\r\nContent-Length: 2048\r\n\r\n" + strings.Repeat("x", 2048), http.StatusRequestEntityTooLarge},
		// Fiber answers a method it does not route before any middleware runs.
		{"unknown method", "FOO /healthz HTTP/1.1\r\nHost: h\r\n" + auth + "\r\n", http.StatusNotImplemented},
	}
	counts := map[int]int{}
	for _, tc := range cases {
		counts[tc.status]++
		k := dialKeepAlive(t, addr)
		resp, body, err := k.roundTrip(http.MethodGet, tc.raw)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if resp.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d: %s", tc.name, resp.StatusCode, tc.status, body)
		}
		for _, leak := range []string{secret, "Bearer", "Authorization", "X-Pad", "ppppp"} {
			if strings.Contains(body, leak) || strings.Contains(fmt.Sprint(resp.Header), leak) {
				t.Errorf("%s: the answer repeats %q: %s", tc.name, leak, body)
			}
		}
		p := decodeProblem(t, resp, body)
		if p.RequestID == "" {
			t.Errorf("%s: no request_id: %s", tc.name, body)
		}
		var line map[string]any
		for _, l := range logs.lines() {
			if l["event"] == "http_request" && l["request_id"] == p.RequestID {
				line = l
			}
		}
		if line == nil {
			t.Errorf("%s: no access-log line with request_id %s", tc.name, p.RequestID)
			continue
		}
		for _, f := range []string{"method", "path", "status", "duration_ms", "bytes"} {
			if _, ok := line[f]; !ok {
				t.Errorf("%s: access-log line without %s: %v", tc.name, f, line)
			}
		}
		if line["status"] != float64(tc.status) {
			t.Errorf("%s: access-log status %v", tc.name, line["status"])
		}
	}
	// /metrics on HTTP_ADDR asks for a token when API_TOKENS is set.
	resp, body := get(t, r.base+"/metrics", "Authorization", "Bearer "+secret)
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d", resp.StatusCode)
	}
	s := scraped(body)
	for status, n := range counts {
		if got := s.value(t, "jobguard_http_requests_total", map[string]string{"route": "unparsed", "code": fmt.Sprint(status)}); got != float64(n) {
			t.Errorf("jobguard_http_requests_total{route=unparsed,code=%d} = %v, want %d", status, got, n)
		}
	}
	logs.mu.Lock()
	all := logs.b.String()
	logs.mu.Unlock()
	if strings.Contains(all, secret) {
		t.Errorf("the bearer token reached the log:\n%s", all)
	}
	var errLines []string
	for _, l := range logs.lines() {
		if b, _ := json.Marshal(l); strings.Contains(string(b), "ppppp") {
			errLines = append(errLines, string(b))
		}
	}
	if len(errLines) > 0 {
		t.Errorf("request headers reached the log: %v", errLines)
	}
}

// A server span outlives its request (a batching exporter sends it later), so nothing in it may
// alias the request's buffers: not the method attribute, not the incoming tracestate. Several
// requests on one keep-alive connection overwrite the same buffers; every span must still show
// its own request. Not parallel: it sets the global tracer provider.
func TestServerSpansKeepNoRequestBytes(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	defer otel.SetTracerProvider(prev)

	r := startApp(t, RoleAPI, nil)
	k := dialKeepAlive(t, strings.TrimPrefix(r.base, "http://"))
	type sent struct{ method, state string }
	want := map[string]sent{}
	for i, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete, http.MethodGet, http.MethodPut} {
		traceID := fmt.Sprintf("%032x", i+1)
		state := fmt.Sprintf("k%d=%s", i, strings.Repeat(string(rune('a'+i)), 8))
		want[traceID] = sent{m, state}
		raw := rawRequest(m, "/healthz", "", "traceparent", "00-"+traceID+"-00000000000000aa-01", "tracestate", state)
		if _, _, err := k.roundTrip(m, raw); err != nil {
			t.Fatal(err)
		}
	}
	spans := exp.GetSpans()
	seen := 0
	for _, s := range spans {
		w, ok := want[s.SpanContext.TraceID().String()]
		if !ok || s.SpanKind != trace.SpanKindServer {
			continue
		}
		seen++
		for _, a := range s.Attributes {
			if a.Key == "http.request.method" && a.Value.AsString() != w.method {
				t.Errorf("span %q: http.request.method %q, want %q", s.Name, a.Value.AsString(), w.method)
			}
		}
		if got := s.Parent.TraceState().String(); got != w.state {
			t.Errorf("span %q: parent tracestate %q, want %q", s.Name, got, w.state)
		}
		if got := s.SpanContext.TraceState().String(); got != w.state {
			t.Errorf("span %q: tracestate %q, want %q", s.Name, got, w.state)
		}
	}
	if seen != len(want) {
		t.Fatalf("%d server spans of the %d requests", seen, len(want))
	}
}

// A problem repeats at most a bounded, escaped part of the request: an unknown path of about
// 3.5 KB holding an escape sequence, a bidi override and bytes that are not UTF-8 answers 404
// with a detail and an instance of at most a few hundred bytes, no raw control or format
// character in either, and the access-log line's path is bounded the same way.
func TestProblemsRepeatABoundedEscapedPath(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	r := startWithLogs(t, RoleAPI, nil, &logs)
	path := "/" + strings.Repeat("a", 3500) + "%1b%5b31m%e2%80%aeevil%ff"
	resp, body := get(t, r.base+path)
	p := decodeProblem(t, resp, body)
	if resp.StatusCode != http.StatusNotFound || len(p.Detail) > 512 || len(p.Instance) > 256 {
		t.Fatalf("unknown 3.5 KB path: %d, detail %d bytes, instance %d bytes", resp.StatusCode, len(p.Detail), len(p.Instance))
	}
	for _, s := range []string{p.Detail, p.Instance} {
		if strings.ContainsAny(s, "\x1b\u202e") || !utf8.ValidString(s) || !strings.HasSuffix(s, "…") {
			t.Fatalf("a problem repeats the path unescaped or whole: %q", s)
		}
	}
	var logged string
	for _, l := range logs.lines() {
		if l["event"] == "http_request" && l["request_id"] == p.RequestID {
			logged, _ = l["path"].(string)
		}
	}
	if logged == "" || len(logged) > 256 || strings.ContainsAny(logged, "\x1b\u202e") {
		t.Fatalf("access-log path: %q", logged)
	}
	// A short, printable path is repeated as it is.
	resp, body = get(t, r.base+"/nowhere/at-all")
	if p := decodeProblem(t, resp, body); p.Instance != "/nowhere/at-all" || !strings.HasSuffix(p.Detail, "GET /nowhere/at-all") {
		t.Fatalf("a short path: %+v", p)
	}
}
