package middleware_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/middleware"
)

// A type that is not encrypted, on a guard without keys, whose payload and result happen to start
// with "jgenc:" (the sealed values' prefix): they are the application's bytes, and the job runs
// and reads back like any other.
func TestReview2PlaintextThatLooksSealedIsPlaintext(t *testing.T) {
	t.Parallel()
	b := setup(t, middleware.Config{})
	b.guard.ProtectJob("echo", middleware.Job{})
	var seen atomic.Value
	b.serve(t, asynq.Config{Concurrency: 2}, map[string]asynq.HandlerFunc{"echo": func(ctx context.Context, task *asynq.Task) error {
		seen.Store(string(task.Payload()))
		run, _ := middleware.RunFrom(ctx)
		run.SetResult("jgenc:result")
		return nil
	}})
	job, err := b.guard.Enqueue(ctx, asynq.NewTask("echo", []byte("jgenc:hello")), middleware.EnqueueOptions{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	var last string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		st, err := b.guard.Status(ctx, job.JobID)
		last = ""
		if err != nil {
			last = err.Error()
		} else {
			last = string(st.Status) + " " + st.Result + " " + st.LastError
			if st.Status == "done" || st.Status == "failed" {
				break
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got, _ := seen.Load().(string); got != "jgenc:hello" || last != "done jgenc:result " {
		t.Fatalf("handler saw %q; status %q", got, last)
	}
}
