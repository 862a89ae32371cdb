package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/tasks"
	"github.com/jobguard/jobguard/tasks/registry"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// The tests here run the API in a whole process, which package app builds; app imports this
// package, so the external test file process_test.go hands its constructors in (SetProcess).

// Role is app.Role's value, spelled here for the tests.
type Role string

// The roles, as app names them.
const (
	RoleAll    Role = "all"
	RoleAPI    Role = "api"
	RoleWorker Role = "worker"
)

// Process is what the tests use of an app.App.
type Process interface {
	Redis() redis.UniversalClient
	Client() *asynq.Client
	Addr() string
	AdminAddr() string
	API() *API
	Run(ctx context.Context) error
	Close()
}

var (
	newProcess func(ctx context.Context, cfg config.Config, role Role, log zerolog.Logger) (Process, error)
	runMain    func(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer, list []tasks.Task) int
)

// SetProcess hands in app.New and app.Main.
func SetProcess(
	n func(ctx context.Context, cfg config.Config, role Role, log zerolog.Logger) (Process, error),
	m func(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer, list []tasks.Task) int,
) {
	newProcess, runMain = n, m
}

// lookupFrom is an environment made of env, for config.FromLookup and Main.
func lookupFrom(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// running is a jobguard process (app.App) serving on a free port for one test.
type running struct {
	Process
	base string
	done chan error
	stop context.CancelFunc
}

func startApp(t testing.TB, role Role, env map[string]string) *running {
	t.Helper()
	return startAppWith(t, role, env, nil)
}

// startAppWith is startApp with before called on the App before it runs (e.g. to add a hook to its
// Redis client while nothing else uses it).
func startAppWith(t testing.TB, role Role, env map[string]string, before func(Process)) *running {
	t.Helper()
	full := map[string]string{"HTTP_ADDR": "127.0.0.1:0", "SHUTDOWN_TIMEOUT": "2s"}
	if _, ok := env["REDIS_URL"]; !ok {
		full["REDIS_URL"] = redistest.NewDB(t).URL()
	}
	for k, v := range env {
		full[k] = v
	}
	cfg, err := config.FromLookup(lookupFrom(full), registry.All())
	if err != nil {
		t.Fatal(err)
	}
	a, err := newProcess(context.Background(), cfg, role, zerolog.New(zerolog.NewTestWriter(t)))
	if err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(a)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Process: a, base: "http://" + a.Addr(), done: make(chan error, 1), stop: cancel}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() { r.shutdown(t) })
	return r
}

// shutdown stops the app and fails the test unless Run returns nil in time.
func (r *running) shutdown(t testing.TB) {
	r.stop()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run returned %v", err)
		}
		r.done <- nil // later calls return at once
	case <-time.After(10 * time.Second):
		t.Error("Run did not return within 10s of the stop")
	}
}

func get(t *testing.T, url string, header ...string) (*http.Response, string) {
	t.Helper()
	return do(t, http.MethodGet, url, "", header...)
}

// testClient opens a connection per request and follows no redirects. Without keep-alive no
// connection the transport dialed ahead (and never used) outlives the app that accepted it: such a
// connection holds a server goroutine until the app's read timeout, past its shutdown.
// Its transport checks every exchange against openapi.json (openapi_check_test.go).
var testClient = &http.Client{
	Transport:     checkingTransport{next: &http.Transport{DisableKeepAlives: true}},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

func do(t testing.TB, method, url, body string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func decodeProblem(t *testing.T, resp *http.Response, body string) problem.Details {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, problem.ContentType) {
		t.Fatalf("content type %q, body %s", ct, body)
	}
	var p problem.Details
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatal(err)
	}
	if p.Status != resp.StatusCode || p.Detail == "" || p.Title == "" || p.RequestID != resp.Header.Get("X-Request-ID") {
		t.Fatalf("problem %+v does not match the answer %d", p, resp.StatusCode)
	}
	if k, ok := problemCode(p.Code); !ok || p.Type != k.Type() || (k.Status != 0 && k.Status != p.Status) {
		t.Fatalf("problem %+v: code and type are not a kind of codes.go with its status", p)
	}
	return p
}
