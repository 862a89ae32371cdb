package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/redistest"
)

// On a cluster, with the queue sharded and the indexes striped, the loops that work from the
// records find each job's delivery in its own shard: the reconciler enqueues a deleted delivery
// again into the job's shard, and the deadline sweep expires a waiting job past its start_by and
// deletes its delivery from its shard.
func TestShardedQueueLoopsFindEachJobsShard(t *testing.T) {
	t.Parallel()
	db := redistest.NewCluster(t)
	s := New(db.Client, Config{Prefix: db.Prefix})
	defer s.Close()
	if s.store.Stripes() < 2 {
		t.Fatalf("%d index stripes on a cluster", s.store.Stripes())
	}
	queue := db.Prefix + "-q"
	names := []string{queue, queue + "~1", queue + "~2"}
	s.Register(TaskConfig{Type: "work", Queue: queue}, func(context.Context, *Job) error { return nil })
	s.ShardQueue(queue, names)
	client := asynq.NewClientFromRedisClient(db.Client)
	defer client.Close()
	insp := asynq.NewInspectorFromRedisClient(db.Client)
	ctx := context.Background()

	// A job on a resource of the last shard, its delivery deleted: redelivered to that shard.
	var resource string
	for i := 0; resource == ""; i++ {
		if r := fmt.Sprint("r", i); ShardIndex(ResourceTag(r), 3) == 2 {
			resource = r
		}
	}
	lost, err := s.Enqueue(ctx, client, Spec{Type: "work", Resource: resource, ProcessIn: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := insp.DeleteTask(names[2], DeliveryID(lost.JobID, 1)); err != nil {
		t.Fatalf("the delivery is not in its shard %s: %v", names[2], err)
	}
	time.Sleep(2 * time.Millisecond) // past the reconciler's millisecond of grace
	got, err := s.NewReconciler(insp, client, ReconcilerConfig{Grace: time.Millisecond}).Pass(ctx)
	if err != nil || got[RepairRedelivered] != 1 {
		t.Fatalf("reconciler pass: %v %v, want 1 redelivered", got, err)
	}
	if _, err := insp.GetTaskInfo(names[2], DeliveryID(lost.JobID, 1)); err != nil {
		t.Fatalf("the redelivery is not in the job's shard: %v", err)
	}

	// A job that nobody serves, past its start_by: expired by the sweep, its delivery deleted.
	late, err := s.Enqueue(ctx, client, Spec{Type: "work", Resource: resource, StartBy: time.Now().Add(300 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := s.ExpireDue(ctx); err != nil {
			t.Fatal(err)
		}
		if v, err := s.Get(ctx, late.JobID); err == nil && v.Record.Status == "expired" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the job past its start_by was not expired")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := insp.GetTaskInfo(names[2], DeliveryID(late.JobID, 1)); !errors.Is(err, asynq.ErrTaskNotFound) {
		t.Fatalf("the expired job's delivery in its shard: %v, want deleted", err)
	}
}
