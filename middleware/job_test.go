package middleware_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/jobguard/jobguard/middleware"
)

// A job-level type through the middleware: Guard.Enqueue makes a job whose plain asynq handler
// finds its run (job id, attempt, payload), reports progress, sets a result, and ends done.
func TestJobLevelRunsAPlainHandlerAsAJob(t *testing.T) {
	t.Parallel()
	b := setup(t, middleware.Config{})
	b.guard.ProtectJob("report", middleware.Job{MaxAttempts: 3})
	var runs atomic.Int64
	var seen atomic.Value
	b.serve(t, asynq.Config{Concurrency: 2}, map[string]asynq.HandlerFunc{"report": func(ctx context.Context, task *asynq.Task) error {
		run, ok := middleware.RunFrom(ctx)
		if !ok {
			t.Error("no run in the handler's context")
			return nil
		}
		runs.Add(1)
		seen.Store(run.JobID() + "|" + string(task.Payload()))
		if err := run.Progress(ctx, 50, "half"); err != nil {
			return err
		}
		run.SetResult("ok")
		return nil
	}})
	job, err := b.guard.Enqueue(ctx, asynq.NewTask("report", []byte("q3")), middleware.EnqueueOptions{Tenant: "acme", OpKey: "report-q3"})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "job done", func() bool {
		st, err := b.guard.Status(ctx, job.JobID)
		return err == nil && st.Status == "done" && st.Result == "ok" && st.Attempt == 1
	})
	if got := seen.Load(); got != job.JobID+"|q3" {
		t.Fatalf("handler saw %v, want %s|q3", got, job.JobID)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d runs, want 1", n)
	}
}

// A job-level type's task enqueued with a plain asynq client runs at lease level (no job record),
// counted in jobguard_unadopted_total: never archived for its missing job.
func TestJobLevelTaskWithoutAJobRunsAtLeaseLevel(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	b := setup(t, middleware.Config{Registerer: reg})
	b.guard.ProtectJob("report", middleware.Job{})
	var jobID atomic.Value
	b.serve(t, asynq.Config{Concurrency: 2}, map[string]asynq.HandlerFunc{"report": func(ctx context.Context, task *asynq.Task) error {
		run, _ := middleware.RunFrom(ctx)
		jobID.Store(run.JobID())
		if run.Fence().Token == 0 {
			t.Error("a lease-level run without a fencing token")
		}
		return nil
	}})
	if _, err := b.client.Enqueue(asynq.NewTask("report", []byte("q4")), asynq.Retention(time.Hour)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "task completed", func() bool {
		done, _ := b.insp.ListCompletedTasks("default")
		return len(done) == 1
	})
	if id := jobID.Load(); id != "" {
		t.Fatalf("run's job id %q, want none (lease level)", id)
	}
	if arch, _ := b.insp.ListArchivedTasks("default"); len(arch) != 0 {
		t.Fatalf("%d archived", len(arch))
	}
	if n := testutil.ToFloat64(metricVec(t, reg, "jobguard_unadopted_total")); n != 1 {
		t.Fatalf("jobguard_unadopted_total %v, want 1", n)
	}
}

// metricVec sums every series of a counter family in reg.
func metricVec(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name})
	c.Add(sum)
	return c
}

// A job-level task that came without a job and lost its run is rescued like any lease-level task:
// its copy takes the same resource (named by the original's id), runs, and the task completes.
func TestUnadoptedTaskIsRescued(t *testing.T) {
	t.Parallel()
	b := setup(t, middleware.Config{LeaseTTL: time.Second})
	b.guard.ProtectJob("report", middleware.Job{})
	var runs atomic.Int64
	firstStarted, firstGoOn := make(chan string, 1), make(chan struct{})
	b.serve(t, asynq.Config{Concurrency: 2}, map[string]asynq.HandlerFunc{"report": func(ctx context.Context, task *asynq.Task) error {
		if runs.Add(1) == 1 {
			run, _ := middleware.RunFrom(ctx)
			firstStarted <- run.Lease().Resource
			<-firstGoOn
		}
		return nil
	}})
	info, err := b.client.Enqueue(asynq.NewTask("report", []byte("q5")), asynq.Retention(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	resource := <-firstStarted
	if resource != "task:"+info.ID {
		t.Fatalf("resource %q, want task:%s", resource, info.ID)
	}
	b.rdb.Del(ctx, b.guard.Locks().LeaseKey(resource))
	eventually(t, 10*time.Second, "the lost run rescued", func() bool {
		n, _ := b.guard.RescueLeases(ctx, b.insp)
		return n == 1
	})
	eventually(t, 10*time.Second, "the copy ran", func() bool { return runs.Load() == 2 })
	close(firstGoOn)
	eventually(t, 10*time.Second, "original and copy completed", func() bool {
		done, _ := b.insp.ListCompletedTasks("default")
		return len(done) == 2
	})
}
