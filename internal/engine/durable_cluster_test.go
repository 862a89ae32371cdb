package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
)

// On a cluster asynq's delivery lives in its queue's slot, usually on another master than the
// job's record: a durable enqueue waits for that master's replica too. With it paused (SIGSTOP)
// the enqueue is ErrNotDurable although the record's replica acknowledged; before, it was
// acknowledged, and a failover of the queue's master could lose the delivery of a 202 job.
func TestDurableClusterEnqueueWaitsForTheQueuesReplica(t *testing.T) {
	t.Parallel()
	cl, err := redistest.StartReplicatedCluster()
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer rdb.Close()
	// Generous: with every replica up, a loaded machine (load 15-22) once took over 300 ms to ack.
	s := New(rdb, Config{DurableReplicas: 1, DurableTimeout: 3 * time.Second})
	defer s.Close()
	client := asynq.NewClientFromRedisClient(rdb)
	defer client.Close()
	ctx, cancel := context.WithTimeout(bg, 60*time.Second)
	defer cancel()
	masterOf := func(key string) string {
		m, err := rdb.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return m.Options().Addr
	}
	// A job, and a queue on a master that none of the confirmation's other keys (the record, the
	// job's stripes of the indexes and of the expiry index) is on: their WAITs would cover the
	// delivery by chance.
	var id, resource string
	var others map[string]bool
	for n := 0; id == ""; n++ {
		resource = fmt.Sprint("r", n)
		cand := NewJobID(resource, time.Now())
		tag, _ := TagOf(cand)
		others = map[string]bool{masterOf(s.locks.Key(tag, "job:"+cand)): true,
			masterOf(s.store.ExpiryKeyOf(cand)): true, masterOf(s.store.IndexKeyOf("", cand)): true}
		if len(others) < 3 {
			id = cand
		}
	}
	tenant := ""
	for n := 0; tenant == ""; n++ {
		if tn := fmt.Sprint("t", n); others[masterOf(s.store.IndexKeyOf(tn, id))] {
			tenant = tn
		}
	}
	queue := ""
	for n := 0; queue == ""; n++ {
		if q := fmt.Sprint("q", n); !others[masterOf("asynq:{"+q+"}:pending")] {
			queue = q
		}
	}
	s.Register(TaskConfig{Type: "ok", Queue: queue}, func(context.Context, *Job) error { return nil })
	queueMaster, err := rdb.MasterForKey(ctx, "asynq:{"+queue+"}:pending")
	if err != nil {
		t.Fatal(err)
	}
	var replica *redistest.Server
	for i := 0; i < 3; i++ {
		if cl.Nodes[i].Addr == queueMaster.Options().Addr {
			replica = cl.Nodes[i+3]
		}
	}
	if replica == nil {
		t.Fatalf("no replica of the queue's master %s", queueMaster.Options().Addr)
	}
	if _, err := s.Enqueue(ctx, client, Spec{Type: "ok", Tenant: tenant, Resource: "up", JobID: NewJobID("up", time.Now())}); err != nil {
		t.Fatalf("with every replica up: %v", err)
	}
	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = replica.Resume() }()
	res, err := s.Enqueue(ctx, client, Spec{Type: "ok", Tenant: tenant, Resource: resource, JobID: id})
	if !errors.Is(err, ErrNotDurable) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("with the queue's replica paused: %+v, %v; want ErrNotDurable", res, err)
	}
}
