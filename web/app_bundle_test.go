package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/app"
	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/guardstack"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
	"github.com/jobguard/jobguard/middleware"
	"github.com/jobguard/jobguard/tasks"
)

// The UI's tests run the whole app (app.New, as cmd/jobguard does) with a probe task type, so the
// wrapped asynqmon routes and the jobs pages are tested through HTTP on the real engine, the real
// scheduler and the app's own wiring and error handler.

const probeType = "ui-probe"

// probe is the probe task type's state: runs per job id, whether its handler fails for good, and
// the cause that ended each run of a job named block-* (which reports 40% progress, then runs
// until its context ends).
type probe struct {
	mu      sync.Mutex
	runs    map[string]int
	causes  map[string]error
	failing atomic.Bool
}

func (p *probe) cause(id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.causes[id]
}

func (p *probe) ran(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs[id]
}

type probeRequest struct {
	TenantID string `json:"tenant_id"`
	Name     string `json:"name"`
	DelayMS  int    `json:"delay_ms,omitempty"`
}

func (r *probeRequest) Validate() error {
	if r.TenantID == "" || r.Name == "" {
		return &tasks.FieldError{Field: "name", Detail: "tenant_id and name are required"}
	}
	return nil
}

func (r *probeRequest) Tenant() string { return r.TenantID }

func (r *probeRequest) Spec() engine.Spec {
	b, _ := json.Marshal(r)
	return engine.Spec{Type: probeType, Tenant: r.TenantID, Resource: r.TenantID + ":" + r.Name, Payload: b,
		Dedup: &engine.Dedup{Policy: engine.UntilDone, Key: r.Name}, ProcessIn: time.Duration(r.DelayMS) * time.Millisecond}
}

func (p *probe) task() tasks.Task {
	return tasks.Task{
		Type:    probeType,
		Config:  middleware.Job{MaxAttempts: 1},
		Request: func() tasks.Request { return &probeRequest{} },
		Handler: guardstack.EngineHandlerOf(func(tasks.Deps) engine.Handler {
			return func(ctx context.Context, j *engine.Job) error {
				p.mu.Lock()
				p.runs[j.ID]++
				p.mu.Unlock()
				var r probeRequest
				_ = json.Unmarshal(j.Payload, &r)
				if strings.HasPrefix(r.Name, "block") {
					if err := j.Progress(ctx, 40, "halfway"); err != nil {
						return err
					}
					<-ctx.Done()
					p.mu.Lock()
					p.causes[j.ID] = context.Cause(ctx)
					p.mu.Unlock()
					return context.Cause(ctx)
				}
				if p.failing.Load() {
					return engine.Permanent(errors.New("probe told to fail"))
				}
				return nil
			}
		}),
	}
}

// flakyType is a task type whose handler fails transiently every time, with attempts left and a
// backoff of a day: its job stays retrying, its delivery in asynq's retry state.
const flakyType = "ui-flaky"

type flakyRequest struct{ probeRequest }

func (r *flakyRequest) Spec() engine.Spec {
	spec := r.probeRequest.Spec()
	spec.Type = flakyType
	return spec
}

func (p *probe) flakyTask() tasks.Task {
	return tasks.Task{
		Type:    flakyType,
		Config:  middleware.Job{MaxAttempts: 3, BackoffBase: 24 * time.Hour, BackoffMax: 24 * time.Hour},
		Request: func() tasks.Request { return &flakyRequest{} },
		Handler: guardstack.EngineHandlerOf(func(tasks.Deps) engine.Handler {
			return func(ctx context.Context, j *engine.Job) error {
				p.mu.Lock()
				p.runs[j.ID]++
				p.mu.Unlock()
				return errors.New("flaky probe fails for now")
			}
		}),
	}
}

// bundle is a running app and what a test needs around it.
type bundle struct {
	base  string
	probe *probe
	insp  *asynq.Inspector
	plain *asynq.Client // enqueues tasks that are not jobguard deliveries
}

// startApp runs the app (role all: API, UI and a worker) on its own Redis database until the test ends.
func startApp(t *testing.T, env map[string]string) *bundle {
	t.Helper()
	return startAppAs(t, app.RoleAll, env)
}

// startAppAs is startApp in another role (app.RoleAPI: no worker, deliveries stay pending).
func startAppAs(t *testing.T, role app.Role, env map[string]string) *bundle {
	t.Helper()
	db := redistest.NewDB(t)
	full := map[string]string{"REDIS_URL": db.URL(), "HTTP_ADDR": "127.0.0.1:0", "SHUTDOWN_TIMEOUT": "2s", "LOG_LEVEL": "warn"}
	for k, v := range env {
		full[k] = v
	}
	p := &probe{runs: map[string]int{}, causes: map[string]error{}}
	cfg, err := config.FromLookup(func(k string) (string, bool) { v, ok := full[k]; return v, ok }, []tasks.Task{p.task(), p.flakyTask()})
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.New(context.Background(), cfg, role, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	b := &bundle{base: "http://" + a.Addr(), probe: p, insp: asynq.NewInspectorFromRedisClient(db.Client),
		plain: asynq.NewClientFromRedisClient(db.Client)}
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("Run did not return within 15s of the stop")
		}
	})
	return b
}

// testClient opens a connection per request (none outlives the app) and follows no redirects.
var testClient = &http.Client{
	Transport:     &http.Transport{DisableKeepAlives: true},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

func (b *bundle) do(t *testing.T, method, path, body string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, b.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// submit posts a probe job and returns its id and whether it was deduplicated.
func (b *bundle) submit(t *testing.T, tenant, name string, delay time.Duration) (string, bool) {
	t.Helper()
	body, _ := json.Marshal(probeRequest{TenantID: tenant, Name: name, DelayMS: int(delay.Milliseconds())})
	code, out := b.do(t, http.MethodPost, "/jobs/"+probeType, string(body))
	var a struct {
		JobID        string `json:"job_id"`
		Deduplicated bool   `json:"deduplicated"`
	}
	if err := json.Unmarshal([]byte(out), &a); err != nil || code != http.StatusAccepted && code != http.StatusOK {
		t.Fatalf("submit %s: %d %s", name, code, out)
	}
	return a.JobID, a.Deduplicated
}

// jobView is what the tests read of GET /jobs/{id}.
type jobView struct {
	Status     string `json:"status"`
	Deliveries []struct {
		TaskID  string `json:"task_id"`
		Current bool   `json:"current"`
	} `json:"deliveries"`
	Timeline []engine.Event `json:"timeline"`
}

func (v jobView) delivery() string {
	for _, d := range v.Deliveries {
		if d.Current {
			return d.TaskID
		}
	}
	return ""
}

func (b *bundle) job(t *testing.T, id string) jobView {
	t.Helper()
	code, out := b.do(t, http.MethodGet, "/jobs/"+id, "")
	var v jobView
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != http.StatusOK {
		t.Fatalf("GET /jobs/%s: %d %s", id, code, out)
	}
	return v
}

// waitStatus polls the job's view until it has status.
func (b *bundle) waitStatus(t *testing.T, id, status string) jobView {
	t.Helper()
	var v jobView
	testsupport.Eventually(t, 20*time.Second, "job "+id+" becomes "+status, func() bool {
		v = b.job(t, id)
		return v.Status == status
	})
	return v
}

// taskState is the task's state in asynq, "gone" when asynq no longer has it.
func (b *bundle) taskState(t *testing.T, queue, id string) string {
	t.Helper()
	info, err := b.insp.GetTaskInfo(queue, id)
	if errors.Is(err, asynq.ErrTaskNotFound) {
		return "gone"
	}
	if err != nil {
		t.Fatal(err)
	}
	return info.State.String()
}
