package tasks

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/guardstack"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
	"github.com/jobguard/jobguard/middleware"
)

// probeRequest is the smallest task type: its handler reports its key and its setting.
type probeRequest struct {
	TenantID string `json:"tenant_id"`
}

func (p *probeRequest) Validate() error { return CheckID("tenant_id", p.TenantID) }
func (p *probeRequest) Tenant() string  { return p.TenantID }
func (p *probeRequest) Spec() engine.Spec {
	b, _ := json.Marshal(p)
	return engine.Spec{Type: "probe", Tenant: p.TenantID, Resource: p.TenantID + ":probe", Payload: b}
}

func probeTask() Task {
	return Task{
		Type:     "probe",
		Request:  func() Request { return &probeRequest{} },
		Settings: []Setting{{Name: "PROBE_WORD", Default: "default-word"}},
		Routes: []Route{{Method: http.MethodGet, Path: "/probe/:tenant/:name", Tenant: "tenant",
			Params: map[string]func(string) error{"tenant": IDParam("tenant"), "name": IDParam("name")},
			Read:   func(context.Context, ReadDeps, map[string]string) (any, error) { return nil, NotFound("nothing") }}},
		Handler: func(d Deps) asynq.Handler {
			return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
				job, _ := middleware.RunFrom(ctx)
				var p probeRequest
				_ = json.Unmarshal(t.Payload(), &p)
				key := engine.ResourceKey(job.Locks(), p.TenantID+":probe", "result")
				same := job.Key("result") == key
				return job.Locks().Redis().Set(ctx, key, d.Setting("PROBE_WORD")+" same_key="+map[bool]string{true: "yes", false: "no"}[same], 0).Err()
			})
		},
	}
}

// engine.ResourceKey is the key Job.Key gives the handler of a job on the resource, and a setting
// the caller left out reaches the handler with its default.
func TestResourceKeyAndSettingDefault(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	g := middleware.New(db.Client, middleware.Config{})
	mux := Protect(g, Deps{}, []Task{probeTask()})
	s := guardstack.Of(g)
	srv := asynq.NewServerFromRedisClient(db.Client, g.ServerConfig(asynq.Config{
		Concurrency: 1, Queues: map[string]int{"default": 1}, Logger: testsupport.QuietAsynq{}, LogLevel: asynq.FatalLevel}))
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.BeginShutdown(); srv.Shutdown(); waitHandlers(s); _ = g.Close() })
	if _, err := s.Enqueue(bg, asynq.NewClientFromRedisClient(db.Client), (&probeRequest{TenantID: "t1"}).Spec()); err != nil {
		t.Fatal(err)
	}
	key := engine.ResourceKey(s.Locks(), "t1:probe", "result")
	var got string
	testsupport.Eventually(t, 10*time.Second, "the probe job wrote its result", func() bool {
		got = db.Client.Get(bg, key).Val()
		return got != ""
	})
	if got != "default-word same_key=yes" {
		t.Fatalf("result %q", got)
	}
}

// A well-formed task passes Check; each mistake Check knows is refused, naming the task.
func TestCheck(t *testing.T) {
	t.Parallel()
	if err := Check([]Task{probeTask()}); err != nil {
		t.Fatalf("the probe task: %v", err)
	}
	for name, mutate := range map[string]func(*Task){
		"empty type":          func(t *Task) { t.Type = "" },
		"no handler":          func(t *Task) { t.Handler = nil },
		"a POST route":        func(t *Task) { t.Routes[0].Method = http.MethodPost },
		"no tenant parameter": func(t *Task) { t.Routes[0].Tenant = "owner" },
		"a parameter without validation": func(t *Task) {
			t.Routes[0].Params = map[string]func(string) error{"tenant": IDParam("tenant")}
		},
		"a validation without parameter": func(t *Task) { t.Routes[0].Params["extra"] = IDParam("extra") },
		"no Read":                        func(t *Task) { t.Routes[0].Read = nil },
		"a relative path":                func(t *Task) { t.Routes[0].Path = "probe/:tenant/:name" },
		"a lower-case setting":           func(t *Task) { t.Settings[0].Name = "probe_word" },
	} {
		task := probeTask()
		mutate(&task)
		if err := Check([]Task{task}); err == nil || !strings.Contains(err.Error(), "tasks:") {
			t.Errorf("%s: %v", name, err)
		}
	}
	other := probeTask()
	other.Type = "probe-2"
	if err := Check([]Task{probeTask(), other}); err == nil || !strings.Contains(err.Error(), "probe's too") {
		t.Errorf("a route and a setting of two tasks: %v", err)
	}
	if err := Check([]Task{probeTask(), probeTask()}); err == nil {
		t.Error("a type listed twice passed")
	}
	if got := probeTask().Routes[0].ParamNames(); strings.Join(got, ",") != "tenant,name" {
		t.Errorf("ParamNames = %v", got)
	}
}

// waitHandlers waits (bounded) for handlers asynq's Shutdown gave up on, so their conclusions land
// before the stack closes, as the app does.
func waitHandlers(s *engine.Stack) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	s.Wait(ctx)
}
