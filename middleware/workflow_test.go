package middleware_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/middleware"
)

// A workflow of plain asynq handlers under the guard: the child reads its parents' results through
// its run, runs after both, once; a refused workflow names node and field.
func TestWorkflowOfPlainHandlers(t *testing.T) {
	t.Parallel()
	b := setup(t, middleware.Config{})
	b.guard.ProtectJob("step", middleware.Job{})
	var mu sync.Mutex
	seen := map[string]map[string]middleware.ParentResult{}
	b.serve(t, asynq.Config{Concurrency: 4}, map[string]asynq.HandlerFunc{
		"step": func(ctx context.Context, task *asynq.Task) error {
			run, _ := middleware.RunFrom(ctx)
			p, err := run.ParentResults(ctx)
			if err != nil {
				return err
			}
			mu.Lock()
			seen[string(task.Payload())] = p
			mu.Unlock()
			run.SetResult("made by " + string(task.Payload()))
			return nil
		},
	})
	step := func(id string, parents ...string) middleware.WorkflowNode {
		return middleware.WorkflowNode{ID: id, Task: asynq.NewTask("step", []byte(id)), Parents: parents}
	}
	w, err := b.guard.EnqueueWorkflow(ctx, middleware.Workflow{Tenant: "t1", Nodes: []middleware.WorkflowNode{
		step("fetch"), step("parse"), step("report", "fetch", "parse"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "workflow done", func() bool {
		s, err := b.guard.Workflow(ctx, w.ID)
		return err == nil && s.Status == "done"
	})
	mu.Lock()
	p := seen["report"]
	mu.Unlock()
	if p["fetch"].Result != "made by fetch" || p["parse"].Result != "made by parse" || p["parse"].JobID != w.Jobs["parse"] {
		t.Fatalf("report read %+v", p)
	}
	_, err = b.guard.EnqueueWorkflow(ctx, middleware.Workflow{Nodes: []middleware.WorkflowNode{step("a", "b"), step("b", "a")}})
	var we *middleware.WorkflowError
	if !errors.As(err, &we) || we.Field != "parents" || we.Node != "a" {
		t.Fatalf("a cycle: %v", err)
	}
	if err := b.guard.CancelWorkflow(ctx, w.ID); !errors.Is(err, middleware.ErrWorkflowEnded) {
		t.Fatalf("cancel of a done workflow: %v", err)
	}
}
