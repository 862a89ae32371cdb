package middleware_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/middleware"
)

// A fairly dispatched type through the middleware: Guard.Enqueue puts the jobs in the admission
// layer (status waiting while their key waits), a sequence runs one job per key in enqueue order,
// and FairCounts shows each key's backlog while it waits.
func TestFairSequenceThroughTheGuard(t *testing.T) {
	t.Parallel()
	b := setup(t, middleware.Config{})
	b.guard.ProtectJob("ledger", middleware.Job{Fair: &middleware.Fair{Sequence: true, Capacity: 4,
		Key: func(o middleware.EnqueueOptions) string { return o.Tenant }}})
	gate := make(chan struct{})
	var mu sync.Mutex
	var order []string
	b.serve(t, asynq.Config{Concurrency: 4}, map[string]asynq.HandlerFunc{"ledger": func(ctx context.Context, task *asynq.Task) error {
		if string(task.Payload()) == "acme-0" {
			<-gate
		}
		mu.Lock()
		order = append(order, string(task.Payload()))
		mu.Unlock()
		return nil
	}})
	var ids []string
	for _, p := range []string{"acme-0", "acme-1", "acme-2"} {
		job, err := b.guard.Enqueue(ctx, asynq.NewTask("ledger", []byte(p)), middleware.EnqueueOptions{Tenant: "acme"})
		if err != nil || !job.Waiting {
			t.Fatalf("enqueue of a sequence's job: %+v %v, want Waiting", job, err)
		}
		ids = append(ids, job.JobID)
	}
	st, err := b.guard.Status(ctx, ids[2])
	if err != nil || st.Status != "waiting" {
		t.Fatalf("the third job of a busy sequence is %q (%v), want waiting", st.Status, err)
	}
	c, err := b.guard.FairCounts(ctx, "ledger", 5)
	if err != nil || c.Admitted != 1 || len(c.Top) != 1 || c.Top[0] != (middleware.FairKey{Key: "acme", Waiting: 2, Running: 1}) {
		t.Fatalf("counts %+v (%v), want acme with 2 waiting and 1 running", c, err)
	}
	close(gate)
	eventually(t, 10*time.Second, "sequence done", func() bool {
		st, err := b.guard.Status(ctx, ids[2])
		return err == nil && st.Status == "done"
	})
	mu.Lock()
	defer mu.Unlock()
	if len(order) != 3 || order[0] != "acme-0" || order[1] != "acme-1" || order[2] != "acme-2" {
		t.Fatalf("ran %v, want acme-0, acme-1, acme-2", order)
	}
}

// A server whose guard dispatches a type fairly polls asynq's queues every 50 ms when it sets no
// TaskCheckInterval: a sequence's next job is delivered only at its predecessor's end, and with
// asynq's 1 s an idle processor left it waiting up to 1.5 s (a lone key of 20 jobs took 18 s in
// the template, 1.9 s after). A server that sets its own, or has no fair type, keeps its own.
func TestServerConfigPollsOftenForFairTypes(t *testing.T) {
	t.Parallel()
	plain := middleware.New(nil, middleware.Config{})
	defer plain.Close()
	plain.ProtectJob("report", middleware.Job{})
	if got := plain.ServerConfig(asynq.Config{}).TaskCheckInterval; got != 0 {
		t.Fatalf("no fair type: TaskCheckInterval %s, want asynq's default (0)", got)
	}
	fair := middleware.New(nil, middleware.Config{})
	defer fair.Close()
	fair.ProtectJob("ledger", middleware.Job{Fair: &middleware.Fair{Sequence: true}})
	if got := fair.ServerConfig(asynq.Config{}).TaskCheckInterval; got != 50*time.Millisecond {
		t.Fatalf("a fair type: TaskCheckInterval %s, want 50ms", got)
	}
	if got := fair.ServerConfig(asynq.Config{TaskCheckInterval: 300 * time.Millisecond}).TaskCheckInterval; got != 300*time.Millisecond {
		t.Fatalf("the server's own TaskCheckInterval became %s", got)
	}
}
