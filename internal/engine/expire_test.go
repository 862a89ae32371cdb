package engine

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func lastEvent(v View) Event { return v.Timeline[len(v.Timeline)-1] }

// A job whose delivery comes after its start_by is expired by the start script instead of run: event
// expired (reason start_by), counted, its dedup marker released (the same request makes a new job),
// its delivery acknowledged. An expired job is ended: a cancel is ErrEnded, a replay ErrNotFailed.
func TestStartByExpiresALateStart(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	var runs atomic.Int64
	h := newHarness(t, Config{Clock: clk}, func(s *Stack) {
		s.Register(TaskConfig{Type: "x"}, func(ctx context.Context, j *Job) error { runs.Add(1); return nil })
	})
	spec := Spec{Type: "x", Resource: "r", Dedup: &Dedup{Policy: UntilDone, Key: "k"}, ProcessIn: time.Second,
		StartBy: clk.Now().Add(time.Minute)}
	id := h.enqueue(spec)
	clk.Advance(2 * time.Minute) // before the delivery comes (ProcessIn)
	v := h.waitStatus(id, "expired", 10*time.Second)
	if e := lastEvent(v); e.Event != "expired" || !strings.HasPrefix(e.Detail, "start_by: ") || runs.Load() != 0 ||
		v.Record.StartBy.UnixMilli() != spec.StartBy.UnixMilli() || v.Record.FinishedAt.IsZero() {
		t.Fatalf("expired at start: %+v, last event %+v, %d runs", v.Record, e, runs.Load())
	}
	eventually(t, 10*time.Second, "the delivery is acknowledged", func() bool {
		_, err := h.insp.GetTaskInfo("default", DeliveryID(id, 1))
		return errors.Is(err, asynq.ErrTaskNotFound)
	})
	if n := testutil.ToFloat64(h.stack.m.expired.WithLabelValues("x", "start_by")); n != 1 {
		t.Fatalf("jobs_expired_total{reason=start_by} = %v, want 1", n)
	}
	if _, err := h.stack.Cancel(bg, id, CancelRequest{By: "test"}); !errors.Is(err, ErrEnded) {
		t.Fatalf("cancel of an expired job: %v, want ErrEnded", err)
	}
	if _, err := h.stack.Replay(bg, h.client, id); !errors.Is(err, ErrNotFailed) {
		t.Fatalf("replay of an expired job: %v, want ErrNotFailed", err)
	}
	spec.StartBy = clk.Now().Add(time.Minute)
	spec.ProcessIn = 0
	again, err := h.stack.Enqueue(bg, h.client, spec)
	if err != nil || again.Deduplicated || again.JobID == id {
		t.Fatalf("the same request after the expiry: %+v %v, want a new job", again, err)
	}
	h.waitStatus(again.JobID, "done", 10*time.Second)
}

// A retry is a start too: a job that failed once and whose retry comes after its start_by expires.
func TestStartByExpiresALateRetry(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	var runs atomic.Int64
	h := newHarness(t, Config{Clock: clk}, func(s *Stack) {
		s.Register(TaskConfig{Type: "x", Backoff: Backoff{Base: time.Second, Max: time.Second}}, func(ctx context.Context, j *Job) error {
			runs.Add(1)
			return errors.New("not yet")
		})
	})
	id := h.enqueue(Spec{Type: "x", StartBy: clk.Now().Add(time.Minute)})
	h.waitStatus(id, "retrying", 10*time.Second)
	clk.Advance(2 * time.Minute)
	v := h.waitStatus(id, "expired", 10*time.Second)
	if e := lastEvent(v); e.Event != "expired" || !strings.Contains(e.Detail, "(was retrying)") || runs.Load() != 1 {
		t.Fatalf("last event %+v, %d runs, want expired from retrying after 1 run", e, runs.Load())
	}
}

// The sweep (ExpireDue, each rescue pass) expires a waiting job whose delivery does not come by its
// start_by (here scheduled past it) and deletes that delivery from asynq; a job with time left and a
// job that started in time are left alone, and the one that started runs to its end.
func TestTheSweepExpiresJobsWhoseDeliveryDoesNotCome(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	release := make(chan struct{})
	h := newHarness(t, Config{Clock: clk}, func(s *Stack) {
		s.Register(TaskConfig{Type: "x"}, func(ctx context.Context, j *Job) error { return nil })
		s.Register(TaskConfig{Type: "slow", StartWithin: time.Minute}, func(ctx context.Context, j *Job) error {
			<-release
			return nil
		})
	})
	late := h.enqueue(Spec{Type: "x", ProcessIn: time.Hour, StartBy: clk.Now().Add(90 * time.Minute)})
	later := h.enqueue(Spec{Type: "x", ProcessIn: time.Hour, StartBy: clk.Now().Add(5 * time.Hour)})
	running := h.enqueue(Spec{Type: "slow"}) // the type's StartWithin: start_by a minute from now
	h.waitStatus(running, "processing", 10*time.Second)
	if n, err := h.stack.ExpireDue(bg); n != 0 || err != nil {
		t.Fatalf("a sweep before any deadline: %d %v", n, err)
	}
	clk.Advance(2 * time.Hour)
	if n, err := h.stack.ExpireDue(bg); n != 1 || err != nil {
		t.Fatalf("the sweep expired %d jobs (%v), want 1", n, err)
	}
	v := h.waitStatus(late, "expired", time.Second)
	if e := lastEvent(v); !strings.HasPrefix(e.Detail, "start_by: ") || !strings.Contains(e.Detail, "(was queued)") {
		t.Fatalf("last event %+v", e)
	}
	if _, err := h.insp.GetTaskInfo("default", DeliveryID(late, 1)); !errors.Is(err, asynq.ErrTaskNotFound) {
		t.Fatalf("the expired job's scheduled delivery: %v, want deleted", err)
	}
	h.waitStatus(later, "queued", time.Second)
	close(release)
	v = h.waitStatus(running, "done", 10*time.Second)
	if v.Record.StartBy.IsZero() || has(v, "expired") {
		t.Fatalf("the job that started in time: %+v %v", v.Record, events(v))
	}
	if n, err := h.stack.ExpireDue(bg); n != 0 || err != nil {
		t.Fatalf("a second sweep: %d %v", n, err)
	}
	if n := testutil.ToFloat64(h.stack.m.expired.WithLabelValues("x", "start_by")); n != 1 {
		t.Fatalf("jobs_expired_total{reason=start_by} = %v, want 1", n)
	}
}

// A start_by the first delivery cannot meet is refused before anything is written.
func TestStartByMustFollowTheFirstDelivery(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "x"}, func(ctx context.Context, j *Job) error { return nil })
	})
	for _, spec := range []Spec{
		{Type: "x", StartBy: time.Now().Add(-time.Second)},
		{Type: "x", ProcessIn: time.Minute, StartBy: time.Now().Add(30 * time.Second)},
	} {
		if _, err := h.stack.Enqueue(bg, h.client, spec); !errors.Is(err, ErrInvalidSpec) {
			t.Fatalf("start_by %s with ProcessIn %s: %v, want ErrInvalidSpec", spec.StartBy, spec.ProcessIn, err)
		}
	}
	if keys := h.rdb.Keys(bg, "jobguard:*").Val(); len(keys) != 0 {
		t.Fatalf("a refused spec left %v", keys)
	}
}
