package engine

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/redistest"
)

// After Redis restarted empty asynq:queues names no queue (asynq lists one once per process), so
// the inspector lists none: a dead worker's job is rescued all the same, through the queues the
// process serves, and the reconciler does not take its delivery for lost.
func TestRescueWalksServedQueuesAsynqNoLongerLists(t *testing.T) {
	t.Parallel()
	h, id, hang, _ := stranded(t)
	defer close(hang)
	h.rdb.Del(bg, "asynq:queues") // what the restart left: the queue's tasks, not its listing
	other := New(h.rdb, Config{LeaseTTL: 2 * time.Second, WorkerID: "rescuer"})
	other.Register(TaskConfig{Type: "work", MaxAttempts: 3}, func(ctx context.Context, j *Job) error { return nil })
	defer other.Close()
	if n, err := other.NewRescuer(h.insp, h.client, 0).Pass(bg); n != 0 || err != nil {
		t.Fatalf("the inspector's queues alone: rescued %d (%v), want 0 (the premise)", n, err)
	}
	state, err := other.NewReconciler(h.insp, h.client, ReconcilerConfig{}).deliveryState(bg, "default", DeliveryID(id, 1))
	if err != nil || state != asynq.TaskStateActive {
		t.Fatalf("reconciler reads the unlisted delivery as %v (%v), want active", state, err)
	}
	served := func() []string { return ServedQueues(map[string]int{"default": 1}) }
	if n, err := other.NewRescuer(h.insp, h.client, 0).Serving(served).Pass(bg); n != 1 || err != nil {
		t.Fatalf("with the served queues: rescued %d (%v), want 1", n, err)
	}
	v := h.waitStatus(id, "done", 15*time.Second)
	if v.Raw["deliveries"] != "2" {
		t.Fatalf("after the rescue: %v", v.Record)
	}
}

// decodeTaskMessage reads asynq's task message as the inspector does.
func TestDecodeTaskMessageAgreesWithTheInspector(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	client, insp := asynq.NewClientFromRedisClient(db.Client), asynq.NewInspectorFromRedisClient(db.Client)
	defer client.Close()
	task := asynq.NewTaskWithHeaders("typ", []byte("pay\x00load"), map[string]string{"a": "1", "jobguard-job": "x"})
	info, err := client.Enqueue(task, asynq.Queue("q1"), asynq.MaxRetry(7), asynq.Timeout(90*time.Second),
		asynq.Deadline(time.Unix(4102444800, 0)), asynq.Retention(time.Hour), asynq.ProcessIn(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	want, err := insp.GetTaskInfo("q1", info.ID)
	if err != nil {
		t.Fatal(err)
	}
	b, err := db.Client.HGet(bg, "asynq:{q1}:t:"+info.ID, "msg").Bytes()
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeTaskMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	got.State, got.NextProcessAt = want.State, want.NextProcessAt
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v\nwant    %+v", got, want)
	}
}
