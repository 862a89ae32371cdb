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
	// A type of its own: a reconciler of another test on the cluster drops deliveries of its types
	// whose records it cannot find under its prefix.
	typ := db.Prefix + "-work"
	s.Register(TaskConfig{Type: typ, Queue: queue}, func(context.Context, *Job) error { return nil })
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
	lost, err := s.Enqueue(ctx, client, Spec{Type: typ, Resource: resource, ProcessIn: time.Hour})
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
	late, err := s.Enqueue(ctx, client, Spec{Type: typ, Resource: resource, StartBy: time.Now().Add(300 * time.Millisecond)})
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

// A job stays in the shard it was created in when the shard count changes: the reconciler's
// repair of its lost delivery goes to the shard its record names, where Cancel and the sweep look.
func TestReshardedJobKeepsItsShard(t *testing.T) {
	t.Parallel()
	db := redistest.NewCluster(t)
	s := New(db.Client, Config{Prefix: db.Prefix})
	defer s.Close()
	queue := db.Prefix + "-q"
	three := []string{queue, queue + "~1", queue + "~2"}
	six := append(append([]string(nil), three...), queue+"~3", queue+"~4", queue+"~5")
	typ := db.Prefix + "-work" // of its own, as above
	s.Register(TaskConfig{Type: typ, Queue: queue}, func(context.Context, *Job) error { return nil })
	s.ShardQueue(queue, three)
	client := asynq.NewClientFromRedisClient(db.Client)
	defer client.Close()
	insp := asynq.NewInspectorFromRedisClient(db.Client)
	ctx := context.Background()
	var resource string
	for i := 0; resource == ""; i++ {
		r := fmt.Sprint("r", i)
		if tag := ResourceTag(r); three[ShardIndex(tag, 3)] != six[ShardIndex(tag, 6)] {
			resource = r
		}
	}
	e, err := s.Enqueue(ctx, client, Spec{Type: typ, Resource: resource, ProcessIn: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	created := three[ShardIndex(ResourceTag(resource), 3)]
	s.ShardQueue(queue, six)
	if err := insp.DeleteTask(created, DeliveryID(e.JobID, 1)); err != nil {
		t.Fatalf("the delivery is not in the shard it was created in, %s: %v", created, err)
	}
	time.Sleep(2 * time.Millisecond) // past the reconciler's millisecond of grace
	if got, err := s.NewReconciler(insp, client, ReconcilerConfig{Grace: time.Millisecond}).Pass(ctx); err != nil || got[RepairRedelivered] != 1 {
		t.Fatalf("reconciler pass: %v %v, want 1 redelivered", got, err)
	}
	if _, err := insp.GetTaskInfo(created, DeliveryID(e.JobID, 1)); err != nil {
		t.Fatalf("the repair is not in the record's shard %s: %v", created, err)
	}
}
