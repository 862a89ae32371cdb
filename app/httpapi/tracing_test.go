package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/app/observe"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
	"github.com/jobguard/jobguard/tasks/registry"
)

// syncBuffer collects log lines from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(s.b.Bytes()))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// startLogged runs the app with its JSON log lines captured.
func startLogged(t *testing.T, role Role, logs *syncBuffer) *running {
	cfg, err := config.FromLookup(lookupFrom(map[string]string{"REDIS_URL": redistest.NewDB(t).URL(), "HTTP_ADDR": "127.0.0.1:0"}), registry.All())
	if err != nil {
		t.Fatal(err)
	}
	a, err := newProcess(context.Background(), cfg, role, observe.NewLogger(cfg, logs))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Process: a, base: "http://" + a.Addr(), done: make(chan error, 1), stop: cancel}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() { r.shutdown(t) })
	return r
}

// The HTTP request's server span and the worker's consumer span share one trace; the logs carry
// the stable fields and the trace id, and never the payload. Not parallel: it sets the global
// tracer provider.
func TestTraceFromRequestToWorkerAndLogFields(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	defer otel.SetTracerProvider(prev)

	logs := &syncBuffer{}
	r := startLogged(t, RoleAll, logs)
	const marker = "payload-marker-7f3"
	resp, body := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"`+marker+`"}`)
	var a jobAnswer
	_ = json.Unmarshal([]byte(body), &a)
	if resp.StatusCode != 202 {
		t.Fatal(resp.StatusCode, body)
	}
	waitJob(t, r, a.JobID, "done")

	var server, run sdktrace.ReadOnlySpan
	testsupport.Eventually(t, 5*time.Second, "server and consumer spans", func() bool {
		for _, s := range exp.GetSpans().Snapshots() {
			switch {
			case s.Name() == "POST /jobs/rebuild-cache":
				server = s
			case s.Name() == "jobguard.run rebuild-cache":
				run = s
			}
		}
		return server != nil && run != nil
	})
	if run.SpanContext().TraceID() != server.SpanContext().TraceID() || run.Parent().SpanID() != server.SpanContext().SpanID() {
		t.Fatalf("the worker span does not continue the request's trace: %s/%s vs %s", run.SpanContext().TraceID(), run.Parent().SpanID(), server.SpanContext().TraceID())
	}
	if run.SpanKind() != trace.SpanKindConsumer || server.SpanKind() != trace.SpanKindServer {
		t.Fatalf("kinds %v %v", run.SpanKind(), server.SpanKind())
	}
	attrs := map[string]string{}
	for _, kv := range run.Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	if attrs["jobguard.job_id"] != a.JobID || attrs["jobguard.attempt"] != "1" || attrs["jobguard.fencing_token"] != "1" {
		t.Fatalf("run span attributes %v", attrs)
	}
	children := map[string]bool{}
	for _, s := range exp.GetSpans().Snapshots() {
		if s.Parent().SpanID() == run.SpanContext().SpanID() {
			children[s.Name()] = true
		}
	}
	if !children["jobguard.start"] || !children["jobguard.finish"] {
		t.Fatalf("script spans under the run: %v", children)
	}

	var done map[string]any
	for _, l := range logs.lines() {
		if l["event"] == "done" && l["job_id"] == a.JobID {
			done = l
		}
		raw, _ := json.Marshal(l)
		if strings.Contains(string(raw), marker) {
			t.Errorf("a log line carries the payload: %s", raw)
		}
	}
	for _, f := range []string{"job_id", "delivery", "worker_id", "attempt", "lease_owner", "fencing_token", "event", "trace_id"} {
		if done == nil || done[f] == nil || done[f] == "" {
			t.Fatalf("the done line lacks %s: %v", f, done)
		}
	}
	if done["trace_id"] != run.SpanContext().TraceID().String() {
		t.Fatalf("trace_id %v, span %s", done["trace_id"], run.SpanContext().TraceID())
	}
}
