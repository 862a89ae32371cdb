package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/guardstack"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
	"github.com/jobguard/jobguard/middleware"
	"github.com/jobguard/jobguard/tasks"
	"github.com/jobguard/jobguard/tasks/registry"
)

// greet is a third task type, written as a file in tasks/ would be.
type greetRequest struct {
	TenantID string `json:"tenant_id"`
	Name     string `json:"name"`
}

func (g *greetRequest) Validate() error {
	if g.TenantID == "" {
		return &tasks.FieldError{Field: "tenant_id", Detail: "is required"}
	}
	if g.Name == "" {
		return &tasks.FieldError{Field: "name", Detail: "is required"}
	}
	return nil
}
func (g *greetRequest) Tenant() string { return g.TenantID }
func (g *greetRequest) Spec() engine.Spec {
	b, _ := json.Marshal(g)
	return engine.Spec{Type: "greet", Tenant: g.TenantID, Resource: g.TenantID + ":" + g.Name, Payload: b}
}

var greet = tasks.Task{
	Type:    "greet",
	Request: func() tasks.Request { return &greetRequest{} },
	Handler: guardstack.EngineHandlerOf(func(tasks.Deps) engine.Handler {
		return func(ctx context.Context, j *engine.Job) error {
			var g greetRequest
			_ = json.Unmarshal(j.Payload, &g)
			j.SetResult("hello " + g.Name)
			return nil
		}
	}),
}

// The task list alone gives a type both its route and its handler.
func TestTaskListDrivesRouteAndHandler(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	list := append(registry.All(), greet)
	guard := middleware.New(db.Client, middleware.Config{})
	defer guard.Close()
	mux := tasks.Protect(guard, tasks.Deps{}, list)
	stack := guardstack.Of(guard)
	f := fiber.New(fiber.Config{ErrorHandler: problem.ErrorHandler(nopLogger())})
	(&api{stack: stack, client: asynq.NewClientFromRedisClient(db.Client), tasks: list,
		idem: idempotency{rdb: db.Client, prefix: "jobguard", retention: time.Hour}}).routes(f)
	srv := asynq.NewServerFromRedisClient(db.Client, guard.ServerConfig(asynq.Config{
		Concurrency: 2, Queues: map[string]int{"default": 1}, Logger: testsupport.QuietAsynq{}, LogLevel: asynq.FatalLevel}))
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()

	req, _ := http.NewRequest(http.MethodPost, "/jobs/greet", strings.NewReader(`{"tenant_id":"t1","name":"ada"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.Test(req, -1)
	if err != nil || resp.StatusCode != 202 {
		t.Fatalf("POST /jobs/greet: %v %v", resp, err)
	}
	var a jobAnswer
	_ = json.NewDecoder(resp.Body).Decode(&a)
	testsupport.Eventually(t, 10*time.Second, "the greet job is done by its handler", func() bool {
		v, err := stack.Get(context.Background(), a.JobID)
		return err == nil && v.Raw["status"] == "done" && v.Raw["result"] == "hello ada"
	})
	req, _ = http.NewRequest(http.MethodPost, "/jobs/greet", strings.NewReader(`{"tenant_id":"t1"}`))
	req.Header.Set("Content-Type", "application/json")
	if resp, _ := f.Test(req, -1); resp.StatusCode != 400 {
		t.Fatalf("invalid greet: %d", resp.StatusCode)
	}
}
