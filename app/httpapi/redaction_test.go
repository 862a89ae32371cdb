package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/app/observe"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
	"github.com/jobguard/jobguard/tasks/registry"
)

// startWithLogs runs the app with env and its JSON log lines (debug level, asynq's own included)
// captured in logs.
func startWithLogs(t *testing.T, role Role, env map[string]string, logs *syncBuffer) *running {
	t.Helper()
	full := map[string]string{"REDIS_URL": redistest.NewDB(t).URL(), "HTTP_ADDR": "127.0.0.1:0", "SHUTDOWN_TIMEOUT": "2s", "LOG_LEVEL": "debug"}
	for k, v := range env {
		full[k] = v
	}
	cfg, err := config.FromLookup(lookupFrom(full), registry.All())
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

// closedPort is a loopback address nothing listens on: a dial is refused at once.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// A rebuild whose source (with a user name, a password and an api_key in its URL) cannot be
// reached fails with a stable text; neither the tenant (job view, timeline), nor the logs, nor
// asynq's task (asynqmon's error_message) see the user name, the password or the key.
func TestSourceSecretsStayOutOfErrorsLogsAndUI(t *testing.T) {
	t.Parallel()
	const user, password, apiKey = "svc-user-5d1", "pw-9c2e", "SECRET-key-77a1"
	logs := &syncBuffer{}
	source := "http://" + user + ":" + password + "@" + closedPort(t) + "/src?api_key=" + apiKey + "&region=eu"
	r := startWithLogs(t, RoleAll, map[string]string{"REBUILD_SOURCE_URL": source}, logs)
	resp, body := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"page"}`)
	var a jobAnswer
	_ = json.Unmarshal([]byte(body), &a)
	if resp.StatusCode != 202 {
		t.Fatal(resp.StatusCode, body)
	}
	var view string
	var v jobView
	testsupport.Eventually(t, 20*time.Second, "the first attempt failed", func() bool {
		_, view = get(t, r.base+"/jobs/"+a.JobID)
		v = jobView{}
		_ = json.Unmarshal([]byte(view), &v)
		return v.LastError != ""
	})
	insp := asynq.NewInspectorFromRedisClient(r.Redis())
	var lastErr string
	testsupport.Eventually(t, 10*time.Second, "asynq holds the delivery's error", func() bool {
		info, err := insp.GetTaskInfo("default", engine.DeliveryID(a.JobID, 1))
		if err == nil {
			lastErr = info.LastErr
		}
		return lastErr != ""
	})
	if v.LastError != "source: request failed (connection refused)" {
		t.Errorf("last_error %q, want the stable text", v.LastError)
	}
	logs.mu.Lock()
	logText := logs.b.String()
	logs.mu.Unlock()
	for where, text := range map[string]string{"GET /jobs/{id}": view, "asynq LastErr": lastErr, "logs": logText} {
		for _, secret := range []string{user, password, apiKey} {
			if strings.Contains(text, secret) {
				t.Errorf("%s carries %q: %.600s", where, secret, text)
			}
		}
	}
}

// A start-up error about a URL variable names the variable, never the URL's credentials or query.
func TestConfigErrorsRedactURLs(t *testing.T) {
	t.Parallel()
	for _, env := range []map[string]string{
		{"REDIS_URL": "redis://svc-user:hunter2@redis:notaport/0?x=KEY-42"},
		{"REDIS_MODE": "cluster", "REDIS_URL": "redis://svc-user:hunter2@node1:7000?addr=node2:bad:port&x=KEY-42"},
		{"REBUILD_SOURCE_URL": "ftp://svc-user:hunter2@source/x?api_key=KEY-42"},
		{"MONITORING_PROMETHEUS_ADDRESS": "ftp://svc-user:hunter2@prometheus:9090?token=KEY-42"},
	} {
		_, err := config.FromLookup(lookupFrom(env), registry.All())
		if err == nil {
			t.Errorf("%v accepted", env)
			continue
		}
		for _, secret := range []string{"svc-user", "hunter2", "KEY-42"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%v: the error carries %q: %v", env, secret, err)
			}
		}
	}
}

// OpenTelemetry's own errors (an exporter that cannot deliver names its endpoint URL) are log
// lines of the process's logger, with the endpoint's credentials and query redacted. Not parallel:
// it sets an environment variable and the global tracer provider and error handler.
func TestTracingErrorsAreRedactedLogLines(t *testing.T) {
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadRequest) // not retried: the exporter reports it at once
	}))
	defer collector.Close()
	endpoint := strings.Replace(collector.URL, "http://", "http://svc-user:hunter2@", 1) + "/?token=KEY-42"
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint)
	prevTP, prevEH := otel.GetTracerProvider(), otel.GetErrorHandler()
	defer func() { otel.SetTracerProvider(prevTP); otel.SetErrorHandler(prevEH) }()
	logs := &syncBuffer{}
	shutdown, err := observe.SetupTracing(context.Background(), zerolog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	_, span := otel.Tracer("test").Start(context.Background(), "probe")
	span.End()
	_ = shutdown(context.Background()) // flushes: the export fails
	text := logs.b.String()
	if !strings.Contains(text, `"component":"otel"`) || !strings.Contains(text, "failed to send") {
		t.Fatalf("the exporter's error is not a log line of ours: %q", text)
	}
	for _, secret := range []string{"svc-user", "hunter2", "KEY-42"} {
		if strings.Contains(text, secret) {
			t.Errorf("the log carries %q: %s", secret, text)
		}
	}
}

// OpenTelemetry's own logger, which speaks while it reads the OTEL_* variables, logs through the
// process's logger with the names of its values only: a malformed endpoint or header never puts
// its userinfo, query or token on stderr. Before, its standard logger printed the raw input
// ("input"="http://svc-user:hunter2@[::1/?token=KEY-42"). Not parallel: it sets environment
// variables and OpenTelemetry's globals.
func TestOpenTelemetryLogsNoValues(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://svc-user:hunter2@[::1/?token=KEY-42")
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%zzKEY-42")
	prevTP, prevEH := otel.GetTracerProvider(), otel.GetErrorHandler()
	defer func() { otel.SetTracerProvider(prevTP); otel.SetErrorHandler(prevEH) }()
	logs := &syncBuffer{}
	stderr := captureStderr(t)
	shutdown, err := observe.SetupTracing(context.Background(), zerolog.New(logs))
	if err == nil {
		_ = shutdown(context.Background())
	}
	text := logs.b.String() + stderr()
	if !strings.Contains(text, `"component":"otel"`) {
		t.Fatalf("OpenTelemetry said nothing through the process's logger: %q (%v)", text, err)
	}
	for _, secret := range []string{"svc-user", "hunter2", "KEY-42"} {
		if strings.Contains(text, secret) || (err != nil && strings.Contains(err.Error(), secret)) {
			t.Errorf("%q reached the log or stderr: %s %v", secret, text, err)
		}
	}
}

// captureStderr redirects the process's file descriptor 2 (where OpenTelemetry's standard logger
// writes, through the os.Stderr it saw at start) to a pipe until the returned function is called,
// which restores it and returns what was written.
func captureStderr(t *testing.T) func() string {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved, err := syscall.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Dup2(int(w.Fd()), 2); err != nil {
		t.Fatal(err)
	}
	done := make(chan string)
	go func() { b, _ := io.ReadAll(r); done <- string(b) }()
	return func() string {
		_ = syscall.Dup2(saved, 2)
		_ = syscall.Close(saved)
		_ = w.Close()
		out := <-done
		_ = r.Close()
		return out
	}
}
