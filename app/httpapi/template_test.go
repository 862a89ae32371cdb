package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/guardstack"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/tasks"
)

// note is a task type written in the test as a file of tasks/ would be: a payload, a handler that
// writes one key in the tenant's slot, a read model of that key and a setting.
type noteRequest struct {
	TenantID string `json:"tenant_id"`
	Text     string `json:"text"`
}

func (n *noteRequest) Validate() error {
	if !config.TenantPattern.MatchString(n.TenantID) {
		return &tasks.FieldError{Field: "tenant_id", Detail: "must be 1-128 of [A-Za-z0-9._-]"}
	}
	return nil
}
func (n *noteRequest) Tenant() string { return n.TenantID }
func (n *noteRequest) Spec() engine.Spec {
	b, _ := json.Marshal(n)
	return engine.Spec{Type: "note", Tenant: n.TenantID, Resource: n.TenantID + ":note", Payload: b}
}

func noteTask() tasks.Task {
	tenantParam := func(v string) error {
		if !config.TenantPattern.MatchString(v) {
			return &tasks.FieldError{Field: "tenant", Detail: "must be 1-128 of [A-Za-z0-9._-]"}
		}
		return nil
	}
	return tasks.Task{
		Type:    "note",
		Request: func() tasks.Request { return &noteRequest{} },
		Settings: []tasks.Setting{{Name: "NOTE_PREFIX", Default: "note:", Help: "put before every note",
			Validate: func(v string) error {
				if strings.Contains(v, "!") {
					return fmt.Errorf("%q holds a '!'", v) // echoes the value: the app redacts it
				}
				return nil
			}}},
		Routes: []tasks.Route{{Method: http.MethodGet, Path: "/notes/:tenant", Tenant: "tenant",
			Params: map[string]func(string) error{"tenant": tenantParam},
			Read: func(ctx context.Context, r tasks.ReadDeps, p map[string]string) (any, error) {
				text, err := r.Locks.Redis().Get(ctx, engine.ResourceKey(r.Locks, p["tenant"]+":note", "note")).Result()
				if errors.Is(err, redis.Nil) {
					return nil, tasks.NotFound("no note for " + p["tenant"])
				}
				return map[string]string{"text": text}, err
			}}},
		Handler: guardstack.EngineHandlerOf(func(d tasks.Deps) engine.Handler {
			return func(ctx context.Context, job *engine.Job) error {
				var n noteRequest
				if err := json.Unmarshal(job.Payload, &n); err != nil {
					return engine.Permanent(err)
				}
				return job.Redis().Set(ctx, engine.ResourceKey(job.Locks(), n.TenantID+":note", "note"), d.Setting("NOTE_PREFIX")+n.Text, 0).Err()
			}
		}),
	}
}

// startTasks runs the app on env with the task types of list only.
func startTasks(t *testing.T, env map[string]string, list []tasks.Task) *running {
	t.Helper()
	full := map[string]string{"REDIS_URL": redistest.NewDB(t).URL(), "HTTP_ADDR": "127.0.0.1:0", "SHUTDOWN_TIMEOUT": "2s"}
	for k, v := range env {
		full[k] = v
	}
	cfg, err := config.FromLookup(lookupFrom(full), list)
	if err != nil {
		t.Fatal(err)
	}
	a, err := newProcess(context.Background(), cfg, RoleAll, zerolog.New(zerolog.NewTestWriter(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Process: a, base: "http://" + a.Addr(), done: make(chan error, 1), stop: cancel}
	describeTestTasks(t, r.base, list) // their routes are in the description this app serves
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() { r.shutdown(t) })
	return r
}

// Deleting the examples leaves a working template: an app whose registry has neither serves
// health and readiness, answers 404 for the examples' routes, and gives a task type registered
// here its POST /jobs/<type>, its read model (behind authentication: 401, 403, 400) and its setting.
func TestTemplateWithoutTheExamples(t *testing.T) {
	t.Parallel()
	const tokenA, tokenB = "token-a-0123456789", "token-b-0123456789"
	r := startTasks(t, map[string]string{"API_TOKENS": tokenA + ":t1," + tokenB + ":t2", "NOTE_PREFIX": "hi:"}, []tasks.Task{noteTask()})
	for _, path := range []string{"/healthz", "/readyz"} {
		if resp, body := get(t, r.base+path); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
	for _, c := range []struct{ method, path string }{
		{http.MethodPost, "/jobs/rebuild-cache"}, {http.MethodPost, "/jobs/reserve-stock"},
		{http.MethodGet, "/cache/t1/home"}, {http.MethodGet, "/stock/t1/sku-1"},
	} {
		resp, body := do(t, c.method, r.base+c.path, `{"tenant_id":"t1","resource_id":"home"}`,
			append([]string{"Content-Type", "application/json"}, bearer(tokenA)...)...)
		if p := decodeProblem(t, resp, body); p.Status != http.StatusNotFound {
			t.Errorf("%s %s without the examples: %+v", c.method, c.path, p)
		}
	}
	if code := getJSON(t, r, "/notes/t1", nil); code != http.StatusUnauthorized {
		t.Errorf("read model without a token: %d", code)
	}
	resp, body := get(t, r.base+"/notes/t1", bearer(tokenA)...)
	if p := decodeProblem(t, resp, body); p.Status != http.StatusNotFound || p.Detail != "no note for t1" {
		t.Errorf("note before the job: %+v", p)
	}
	resp, body = post(t, r, "/jobs/note", `{"tenant_id":"t1","text":"hello"}`, bearer(tokenA)...)
	var a jobAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /jobs/note: %d %s", resp.StatusCode, body)
	}
	waitJob(t, r, a.JobID, "done", bearer(tokenA)...)
	var note struct{ Text string }
	if code := getJSON(t, r, "/notes/t1", &note, bearer(tokenA)...); code != 200 || note.Text != "hi:hello" {
		t.Errorf("note: %d %+v", code, note)
	}
	resp, body = get(t, r.base+"/notes/t1", bearer(tokenB)...)
	if p := decodeProblem(t, resp, body); p.Status != http.StatusForbidden || p.Field != "tenant" {
		t.Errorf("another tenant's note: %+v", p)
	}
	resp, body = get(t, r.base+"/notes/t%7B1%7D", bearer(tokenA)...)
	if p := decodeProblem(t, resp, body); p.Status != http.StatusBadRequest || p.Field != "tenant" {
		t.Errorf("a bad tenant parameter: %+v", p)
	}

	// No task type at all: still a working process.
	empty := startTasks(t, nil, nil)
	if resp, _ := get(t, empty.base+"/readyz"); resp.StatusCode != 200 {
		t.Errorf("readyz with no task type: %d", resp.StatusCode)
	}
	if resp, body := post(t, empty, "/jobs/note", `{}`); resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST /jobs/note with no task type: %d %s", resp.StatusCode, body)
	}
}

// A task's route spends the rate limit of the tenant its path names when the API is open, as the
// app's own routes do.
func TestTaskRouteIsRateLimited(t *testing.T) {
	t.Parallel()
	r := startTasks(t, map[string]string{"RATE_LIMIT": "1", "RATE_LIMIT_BURST": "1"}, []tasks.Task{noteTask()})
	if code := getJSON(t, r, "/notes/a", nil); code != http.StatusNotFound {
		t.Fatalf("first: %d", code)
	}
	if code := getJSON(t, r, "/notes/a", nil); code != http.StatusTooManyRequests {
		t.Fatalf("second within the burst: %d", code)
	}
	if n := r.Redis().Exists(context.Background(), "jobguard:{ratelimit:tenant:a}").Val(); n != 1 {
		t.Fatal("the path's tenant did not pay")
	}
}

// A task's settings are read with the app's variables: a bad value is a ConfigError naming it,
// with the secrets of a URL in the task's own text removed; a task list the app cannot serve
// (a route on its paths, a setting that is one of its variables) does not start.
func TestTaskSettingsAndRoutesAreChecked(t *testing.T) {
	t.Parallel()
	_, err := config.FromLookup(lookupFrom(map[string]string{"NOTE_PREFIX": "http://svc-user:hunter2@x/?k=KEY-42&x=!"}), []tasks.Task{noteTask()})
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Var != "NOTE_PREFIX" {
		t.Fatalf("bad NOTE_PREFIX: %v", err)
	}
	for _, secret := range []string{"svc-user", "hunter2", "KEY-42"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the error carries %q: %v", secret, err)
		}
	}
	c, err := config.FromLookup(lookupFrom(nil), []tasks.Task{noteTask()})
	if err != nil || c.TaskDeps().Setting("NOTE_PREFIX") != "note:" {
		t.Fatalf("default: %v %v", c.TaskSettings, err)
	}
	onJobs := noteTask()
	onJobs.Routes[0].Path = "/jobs/:tenant/notes"
	if _, err := config.FromLookup(lookupFrom(nil), []tasks.Task{onJobs}); err == nil || !strings.Contains(err.Error(), "a path of the app") {
		t.Errorf("a route under /jobs: %v", err)
	}
	ownVar := noteTask()
	ownVar.Settings[0].Name = "REDIS_URL"
	if _, err := config.FromLookup(lookupFrom(nil), []tasks.Task{ownVar}); err == nil || !strings.Contains(err.Error(), "a variable of the app") {
		t.Errorf("a setting named REDIS_URL: %v", err)
	}
	if _, err := config.FromLookup(lookupFrom(nil), []tasks.Task{noteTask(), noteTask()}); err == nil {
		t.Error("a type listed twice started")
	}
}

// The core does not know the example tasks: no non-test file of app names them.
// httpCacheControl is the Cache-Control header and its values, which contain "cache".
var httpCacheControl = regexp.MustCompile(`HeaderCacheControl|"no-cache"|"no-store"`)

func TestAppNamesNoExampleTask(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	example := regexp.MustCompile(`(?i)rebuild|cache|stock|sku|sourceurl|reserve_?stock`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			// HTTP's own Cache-Control names no task.
			line = httpCacheControl.ReplaceAllString(line, "")
			if m := example.FindString(line); m != "" {
				t.Errorf("%s:%d names an example task (%q): %s", f, i+1, m, strings.TrimSpace(line))
			}
		}
	}
}
