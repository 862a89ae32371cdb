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

// scheduledJob starts a harness whose "work" handler counts its runs, and enqueues one job whose first
// delivery waits an hour in asynq's scheduled set: what an operator can delete or archive.
func scheduledJob(t *testing.T) (*harness, string, *atomic.Int32) {
	var runs atomic.Int32
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "work"}, func(context.Context, *Job) error { runs.Add(1); return nil })
	})
	id := h.enqueue(Spec{Type: "work", Resource: "r", ProcessIn: time.Hour})
	return h, id, &runs
}

// eager reconciles records unchanged for a millisecond (the default waits 30 s).
var eager = ReconcilerConfig{Grace: time.Millisecond}

func repaired(t *testing.T, r *Reconciler, kind string, want int) {
	t.Helper()
	time.Sleep(2 * time.Millisecond) // past the millisecond of grace
	got, err := r.Pass(bg)
	if err != nil || got[kind] != want || len(got) > min(want, 1) {
		t.Fatalf("pass: %v %v, want %d %s", got, err, want, kind)
	}
}

func reconciled(h *harness, kind string) float64 {
	return testutil.ToFloat64(h.stack.m.reconciled.WithLabelValues("work", kind))
}

// A queued job whose delivery was deleted in asynq (the UI, its CLI) would wait for ever; the
// reconciler enqueues the same delivery again, once, and the job is done.
func TestReconcilerRedeliversADeletedDelivery(t *testing.T) {
	t.Parallel()
	h, id, runs := scheduledJob(t)
	if err := h.insp.DeleteTask("default", DeliveryID(id, 1)); err != nil {
		t.Fatal(err)
	}
	if reconciled(h, RepairRedelivered) != 0 {
		t.Fatal("the counter does not start at zero")
	}
	if got, err := h.stack.NewReconciler(h.insp, h.client, ReconcilerConfig{}).Pass(bg); err != nil || len(got) != 0 {
		t.Fatalf("within the grace: %v %v", got, err)
	}
	r := h.stack.NewReconciler(h.insp, h.client, eager)
	repaired(t, r, RepairRedelivered, 1)
	v := h.waitStatus(id, "done", 10*time.Second)
	if runs.Load() != 1 || v.Raw["deliveries"] != "1" || !has(v, "reconciled") || reconciled(h, RepairRedelivered) != 1 {
		t.Fatalf("after the repair: %d runs, %v %v", runs.Load(), v.Record, events(v))
	}
	repaired(t, r, RepairRedelivered, 0)
}

// Two reconcilers that read the same record repair it once.
func TestTwoReconcilersRedeliverOnce(t *testing.T) {
	t.Parallel()
	h, id, _ := scheduledJob(t)
	if err := h.insp.DeleteTask("default", DeliveryID(id, 1)); err != nil {
		t.Fatal(err)
	}
	open, _, err := h.stack.store.OpenJobs(bg, "", 10)
	if err != nil || len(open) != 1 {
		t.Fatalf("open jobs: %v %v", open, err)
	}
	if st, err := h.stack.store.TakeLostDelivery(bg, open[0], time.Now(), "first"); err != nil || st != "ok" {
		t.Fatalf("first take: %s %v", st, err)
	}
	if st, err := h.stack.store.TakeLostDelivery(bg, open[0], time.Now(), "second"); err != nil || st != "moved" {
		t.Fatalf("second take of the same reading: %s %v", st, err)
	}
	if v, err := h.stack.Get(bg, id); err != nil || strings.Join(events(v), ",") != "enqueued,reconciled" {
		t.Fatalf("timeline %v (%v), want enqueued and one reconciled", events(v), err)
	}
}

// A queued job whose delivery asynq archived gets it run, and is done.
func TestReconcilerRunsAnArchivedDelivery(t *testing.T) {
	t.Parallel()
	h, id, runs := scheduledJob(t)
	if err := h.insp.ArchiveTask("default", DeliveryID(id, 1)); err != nil {
		t.Fatal(err)
	}
	repaired(t, h.stack.NewReconciler(h.insp, h.client, eager), RepairUnarchived, 1)
	v := h.waitStatus(id, "done", 10*time.Second)
	if runs.Load() != 1 || !has(v, "reconciled") || reconciled(h, RepairUnarchived) != 1 {
		t.Fatalf("after the repair: %d runs, %v %v", runs.Load(), v.Record, events(v))
	}
}

// A delivery whose record is gone is deleted from asynq, and no handler ever runs for it.
func TestReconcilerDropsADeliveryWhoseRecordIsGone(t *testing.T) {
	t.Parallel()
	h, id, runs := scheduledJob(t)
	k, _ := h.stack.store.Keys(id, "")
	h.rdb.Del(bg, k.Record, k.Timeline)
	r := h.stack.NewReconciler(h.insp, h.client, eager)
	repaired(t, r, RepairDropped, 1)
	if _, err := h.insp.GetTaskInfo("default", DeliveryID(id, 1)); !errors.Is(err, asynq.ErrTaskNotFound) {
		t.Fatalf("the delivery is still there: %v", err)
	}
	if runs.Load() != 0 || reconciled(h, RepairDropped) != 1 {
		t.Fatalf("%d runs, %v dropped", runs.Load(), reconciled(h, RepairDropped))
	}
	repaired(t, r, RepairDropped, 0)
}

// A processing job whose worker died and whose active delivery asynq lost is invisible to the
// rescuer (it lists active deliveries); the reconciler rescues it, and the job is done.
func TestReconcilerRescuesAnOrphan(t *testing.T) {
	t.Parallel()
	h, id, hang, runs := stranded(t)
	defer close(hang)
	// The active delivery vanishes from asynq (as a lost write would leave it).
	d1 := DeliveryID(id, 1)
	h.rdb.LRem(bg, "asynq:{default}:active", 0, d1)
	h.rdb.ZRem(bg, "asynq:{default}:lease", d1)
	h.rdb.Del(bg, "asynq:{default}:t:"+d1)
	if _, err := h.insp.GetTaskInfo("default", d1); !errors.Is(err, asynq.ErrTaskNotFound) {
		t.Fatalf("the delivery is still there: %v", err)
	}
	if n, _ := h.stack.NewRescuer(h.insp, h.client, 0).Pass(bg); n != 0 {
		t.Fatalf("the rescuer saw it: %d", n)
	}
	repaired(t, h.stack.NewReconciler(h.insp, h.client, eager), RepairOrphan, 1)
	v := h.waitStatus(id, "done", 15*time.Second)
	if runs.Load() != 2 || v.Raw["deliveries"] != "2" || !has(v, "rescued") || !has(v, "reconciled") || reconciled(h, RepairOrphan) != 1 {
		t.Fatalf("after the repair: %d runs, %v %v", runs.Load(), v.Record, events(v))
	}
}

// A job the reconciler enqueues again keeps its limit: the new delivery carries the job's limit
// key (Limit.Key of what the record keeps), so its run takes a slot of its tenant.
func TestARedeliveredJobKeepsItsLimit(t *testing.T) {
	t.Parallel()
	var token atomic.Int64
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "work", Limit: Limit{Concurrency: 1, Key: func(sp Spec) string { return sp.Tenant }}},
			func(_ context.Context, j *Job) error { token.Store(j.LimitToken()); return nil })
	})
	id := h.enqueue(Spec{Type: "work", Tenant: "a", Resource: "r", ProcessIn: time.Hour})
	if err := h.insp.DeleteTask("default", DeliveryID(id, 1)); err != nil {
		t.Fatal(err)
	}
	repaired(t, h.stack.NewReconciler(h.insp, h.client, eager), RepairRedelivered, 1)
	h.waitStatus(id, "done", 10*time.Second)
	if token.Load() == 0 {
		t.Fatal("the redelivered job's run held no slot of its key")
	}
}

// An orphan the reconciler rescues keeps its limit too: the rescue's delivery carries the limit
// key, though asynq no longer had the delivery whose headers the rescuer copies otherwise.
func TestARescuedOrphanKeepsItsLimit(t *testing.T) {
	t.Parallel()
	tokens := make(chan int64, 2)
	h, id, hang, _ := strandedLimited(t, Limit{Concurrency: 1, Key: func(sp Spec) string { return sp.Tenant }}, tokens)
	defer close(hang)
	d1 := DeliveryID(id, 1)
	h.rdb.LRem(bg, "asynq:{default}:active", 0, d1)
	h.rdb.ZRem(bg, "asynq:{default}:lease", d1)
	h.rdb.Del(bg, "asynq:{default}:t:"+d1)
	repaired(t, h.stack.NewReconciler(h.insp, h.client, eager), RepairOrphan, 1)
	h.waitStatus(id, "done", 15*time.Second)
	first, second := <-tokens, <-tokens
	if first == 0 || second == 0 {
		t.Fatalf("slot tokens of the runs %d, %d: the rescued run held no slot of its key", first, second)
	}
}
