package engine

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/redistest"
)

// Two applications with their own key prefix share one Redis, one task type name and asynq's
// default queue. A's reconciler saw B's deliveries, found no record under its own prefix and
// deleted them (before the fix its pass dropped B's scheduled delivery). It touches only the
// deliveries that carry its prefix; A's rescuer leaves B's active delivery alone too.
func TestReconcilerLeavesAnotherAppsDeliveriesAlone(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	client, insp := asynq.NewClientFromRedisClient(db.Client), asynq.NewInspectorFromRedisClient(db.Client)
	clock := newFakeClock()
	app := func(prefix string) *Stack {
		s := New(db.Client, Config{Prefix: prefix, WorkerID: prefix, Clock: clock})
		s.Register(TaskConfig{Type: "work", MaxAttempts: 3}, func(context.Context, *Job) error { return nil })
		t.Cleanup(s.Close)
		return s
	}
	a, b := app("app-a"), app("app-b")
	scheduled, err := b.Enqueue(bg, client, Spec{Type: "work", Resource: "r", ProcessIn: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	active, err := b.Enqueue(bg, client, Spec{Type: "work", Resource: "r"})
	if err != nil {
		t.Fatal(err)
	}
	takenByADeadWorker(t, db.Client, "default", DeliveryID(active.JobID, 1))

	r := a.NewReconciler(insp, client, ReconcilerConfig{Grace: time.Millisecond})
	clock.Advance(time.Second) // past the millisecond of grace
	if got, err := r.Pass(bg); err != nil || len(got) != 0 {
		t.Fatalf("A's reconciler repaired %v (%v) in B's deliveries", got, err)
	}
	// A's rescuer: B's active delivery, listed by no live server, is past the unstarted grace.
	rescuer := a.NewRescuer(insp, client, 0)
	for range 2 {
		if n, err := rescuer.Pass(bg); err != nil || n != 0 {
			t.Fatalf("A's rescuer rescued %d (%v) of B's deliveries", n, err)
		}
		clock.Advance(UnstartedGrace + time.Second)
	}
	if info, err := insp.GetTaskInfo("default", DeliveryID(scheduled.JobID, 1)); err != nil || info.State != asynq.TaskStateScheduled {
		t.Fatalf("B's scheduled delivery after A's passes: %+v %v", info, err)
	}
	if info, err := insp.GetTaskInfo("default", DeliveryID(active.JobID, 1)); err != nil || info.State != asynq.TaskStateActive {
		t.Fatalf("B's active delivery after A's passes: %+v %v", info, err)
	}
	// B's own reconciler still drops its delivery whose record is gone.
	k, _ := b.store.Keys(scheduled.JobID, "")
	db.Client.Del(bg, k.Record, k.Timeline)
	if _, err := insp.GetTaskInfo("default", DeliveryID(active.JobID, 2)); err == nil {
		t.Fatal("A's rescuer gave B's job a second delivery")
	}
	rb := b.NewReconciler(insp, client, ReconcilerConfig{Grace: time.Millisecond})
	if got, err := rb.Pass(bg); err != nil || got[RepairDropped] != 1 {
		t.Fatalf("B's reconciler: %v %v, want its own orphaned delivery dropped", got, err)
	}
}
