package app

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/tasks/registry"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// running is an App serving on a free port for one test.
type running struct {
	*App
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
func startAppWith(t testing.TB, role Role, env map[string]string, before func(*App)) *running {
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
	a, err := New(context.Background(), cfg, role, zerolog.New(zerolog.NewTestWriter(t)))
	if err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(a)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{App: a, base: "http://" + a.Addr(), done: make(chan error, 1), stop: cancel}
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
var testClient = &http.Client{
	Transport:     &http.Transport{DisableKeepAlives: true},
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

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAll, nil)
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, body := get(t, r.base+path)
		if resp.StatusCode != 200 || !strings.Contains(body, `"status"`) {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
	resp, body := get(t, r.base+"/no/such/route")
	if p := decodeProblem(t, resp, body); p.Status != 404 || !strings.Contains(p.Detail, "/no/such/route") {
		t.Fatalf("unknown route: %+v", p)
	}
}

func TestReadinessFailsWhenRedisIsDown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	r := startApp(t, RoleAPI, map[string]string{"REDIS_URL": "redis://" + srv.Addr + "/0"})
	if resp, _ := get(t, r.base+"/readyz"); resp.StatusCode != 200 {
		t.Fatalf("readyz before the outage: %d", resp.StatusCode)
	}
	srv.Kill()
	resp, body := get(t, r.base+"/readyz")
	p := decodeProblem(t, resp, body)
	if p.Status != http.StatusServiceUnavailable || p.Code != problem.CodeNotReady || !strings.Contains(p.Detail, "redis") {
		t.Fatalf("readyz during the outage: %+v", p)
	}
	if resp, _ := get(t, r.base+"/healthz"); resp.StatusCode != 200 {
		t.Fatalf("healthz must not depend on Redis: %d", resp.StatusCode)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, _ := get(t, r.base+"/readyz")
		if resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz still %d 5s after Redis came back", resp.StatusCode)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestBodyLimit(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, map[string]string{"BODY_LIMIT": "1024"})
	// Under the HTTP client's 4 KiB write buffer: sent in one write, before the server closes.
	resp, body := do(t, http.MethodPost, r.base+"/healthz", strings.Repeat("x", 2048), "Content-Type", "application/json")
	if p := decodeProblem(t, resp, body); p.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized body: %+v", p)
	}
}

func TestMonitoringUI(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAll, nil)
	resp, _ := get(t, r.base+"/monitoring")
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/monitoring/" {
		t.Fatalf("bare root: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, body := get(t, r.base+"/monitoring/")
	if resp.StatusCode != 200 || !strings.Contains(body, `src="/monitoring/static/js/`) {
		t.Fatalf("index: %d %.300s", resp.StatusCode, body)
	}
	// The asset the index names is served under the same root.
	i := strings.Index(body, `src="/monitoring/static/js/`)
	src := body[i+5 : i+5+strings.Index(body[i+5:], `"`)]
	if resp, js := get(t, r.base+src); resp.StatusCode != 200 || len(js) < 1000 {
		t.Fatalf("asset %s: %d, %d bytes", src, resp.StatusCode, len(js))
	}
	if _, err := r.Client().Enqueue(asynq.NewTask("probe", nil), asynq.Queue("low")); err != nil {
		t.Fatal(err)
	}
	resp, body = get(t, r.base+"/monitoring/api/queues")
	if resp.StatusCode != 200 || !strings.Contains(body, `"queue":"low"`) {
		t.Fatalf("queues api: %d %s", resp.StatusCode, body)
	}
}

func TestMonitoringAuthAndReadOnly(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, map[string]string{
		"MONITORING_USER": "admin", "MONITORING_PASSWORD": "s3cret", "MONITORING_READONLY": "true",
	})
	if resp, _ := get(t, r.base+"/monitoring/"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no credentials: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodGet, r.base+"/monitoring/api/queues", nil)
	req.SetBasicAuth("admin", "wrong")
	if resp, err := testClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong password: %v %v", resp, err)
	}
	auth := func(method, path string) int {
		req, _ := http.NewRequest(method, r.base+path, nil)
		req.SetBasicAuth("admin", "s3cret")
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := auth(http.MethodGet, "/monitoring/api/queues"); code != 200 {
		t.Fatalf("with credentials: %d", code)
	}
	if code := auth(http.MethodPost, "/monitoring/api/queues/default:pause"); code != http.StatusMethodNotAllowed {
		t.Fatalf("read-only pause: %d", code)
	}
	if code := auth(http.MethodGet, "/healthz"); code != 200 {
		t.Fatalf("health is not behind the UI's auth: %d", code)
	}
}

func TestWorkerRegistersWithConfiguredQueues(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleWorker, map[string]string{"WORKER_CONCURRENCY": "3", "QUEUES": "hi=5,lo=1"})
	if resp, _ := get(t, r.base+"/monitoring/"); resp.StatusCode != 404 {
		t.Fatalf("a worker serves no UI, got %d", resp.StatusCode)
	}
	insp := asynq.NewInspectorFromRedisClient(r.Redis())
	deadline := time.Now().Add(10 * time.Second)
	for {
		servers, err := insp.Servers()
		if err == nil && len(servers) == 1 {
			s := servers[0]
			if s.Concurrency != 3 || s.Queues["hi"] != 5 || s.Queues["lo"] != 1 {
				t.Fatalf("server registered as %+v", s)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no worker registered within 10s: %v %v", servers, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// API, UI, asynq client, server and inspector all run on the one client: every connection the
// process opened to its database carries the app's client name.
func TestOneSharedRedisClient(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	r := startApp(t, RoleAll, map[string]string{"REDIS_URL": db.URL()})
	if _, err := r.Client().Enqueue(asynq.NewTask("probe", nil)); err != nil {
		t.Fatal(err)
	}
	get(t, r.base+"/monitoring/api/queues")
	get(t, r.base+"/readyz")
	probe := redis.NewClient(&redis.Options{Addr: db.Server.Addr, DB: db.N, ClientName: "probe"})
	defer probe.Close()
	list, err := probe.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	ours := 0
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		if !strings.Contains(line, " db="+strconv.Itoa(db.N)+" ") || strings.Contains(line, "name=probe ") {
			continue
		}
		if !strings.Contains(line, "name=jobguard ") {
			t.Errorf("a connection not from the shared client: %s", line)
		}
		ours++
	}
	if ours == 0 {
		t.Fatal("no connection of the app found")
	}
}

// problemCode is the kind of app/problem's codes called code.
func problemCode(code string) (problem.Kind, bool) {
	for _, k := range problem.Kinds {
		if k.Code == code {
			return k, true
		}
	}
	return problem.Kind{}, false
}
