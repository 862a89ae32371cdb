package engine

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/redistest"
)

// replicated starts a master with one replica (its own servers: a test pauses the replica).
func replicated(t *testing.T) (master, replica *redistest.Server) {
	t.Helper()
	master = redistest.Start(t)
	replica = redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	if err := redistest.WaitReplica(replica.Addr, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	return master, replica
}

// With the replica up, a durable enqueue returns once the replica holds the job; with it paused
// (SIGSTOP) the enqueue fails with ErrNotDurable (the WAIT's verdict, not the caller's deadline), its delivery's start does
// not run the handler (the start is undone: queued, attempt given back), and once the replica
// is back the job runs once.
func TestDurableModeWaitsForTheReplica(t *testing.T) {
	t.Parallel()
	master, replica := replicated(t)
	db := redistest.DB{Server: master, Client: master.Client(t, 0)}
	rc := replica.Client(t, 0)
	var runs atomic.Int32
	// Generous: with the replica up, a loaded machine (load 15-22) once took over 300 ms to ack.
	const timeout = 3 * time.Second
	h := newHarnessOn(t, db, db.Client, Config{DurableReplicas: 1, DurableTimeout: timeout}, func(s *Stack) {
		s.Register(TaskConfig{Type: "ok"}, func(ctx context.Context, j *Job) error {
			runs.Add(1)
			return nil
		})
	})
	record := func(id string) string {
		tag, _ := TagOf(id)
		return h.stack.locks.Key(tag, "job:"+id)
	}

	id := h.enqueue(Spec{Type: "ok", Tenant: "t1", Resource: "t1:up"})
	// A done record no longer writes confirmed (it is derived), and on a loaded machine the job
	// may have run before this read: either proves the replica held the acknowledged job.
	if got := rc.HMGet(bg, record(id), "confirmed", "status").Val(); got[0] != "1" && got[1] != "done" {
		t.Fatalf("the replica's copy of the acknowledged job: confirmed=%v status=%v", got[0], got[1])
	}
	h.waitStatus(id, "done", time.Minute)

	resume := replica.Stall(t)
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	paused := NewJobID("t1:paused", time.Now())
	res, err := h.stack.Enqueue(ctx, h.client, Spec{Type: "ok", Tenant: "t1", Resource: "t1:paused", JobID: paused})
	if !errors.Is(err, ErrNotDurable) || !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, context.DeadlineExceeded) || res.JobID != "" {
		t.Fatalf("enqueue with the replica paused: %+v, %v; want the WAIT's verdict", res, err)
	}
	// The job stands on the master (its confirmation ran); its starts are not durable either.
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(strings.Join(events(h.view(paused)), ","), "requeued") {
		if time.Now().After(deadline) {
			t.Fatalf("no undone start on the timeline: %v", events(h.view(paused)))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times with the replica paused (1 before it)", n)
	}
	if v := h.view(paused); v.Raw["attempt"] != "0" || v.Raw["status"] != "queued" {
		t.Fatalf("an undone start left %s attempt %s", v.Raw["status"], v.Raw["attempt"])
	}
	resume()
	h.waitStatus(paused, "done", time.Minute)
	if n := runs.Load(); n != 2 {
		t.Fatalf("handler runs %d, want 2", n)
	}
}

// Without durable mode no WAIT is sent: a paused replica changes nothing.
func TestDurableModeOffSendsNoWait(t *testing.T) {
	t.Parallel()
	master, replica := replicated(t)
	db := redistest.DB{Server: master, Client: master.Client(t, 0)}
	h := newHarnessOn(t, db, db.Client, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "ok"}, func(ctx context.Context, j *Job) error { return nil })
	})
	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = replica.Resume() }()
	began := time.Now()
	id := h.enqueue(Spec{Type: "ok", Tenant: "t1", Resource: "t1:off"})
	h.waitStatus(id, "done", 10*time.Second)
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("took %s", took)
	}
	if n := db.Client.Info(bg, "commandstats").Val(); strings.Contains(n, "cmdstat_wait:") {
		t.Fatal("WAIT was sent with durable mode off")
	}
}

func (h *harness) view(id string) View {
	h.t.Helper()
	v, err := h.stack.Get(bg, id)
	if err != nil {
		h.t.Fatal(err)
	}
	return v
}

// In durable mode a sweep's confirmations of a workflow's nodes count only once the replicas hold
// them: a sweep whose WAIT was refused keeps the workflow in the set of unconfirmed ones, and so
// does every sweep after it (the nodes, confirmed on the master, are confirmed again for the WAIT)
// until the replica acknowledges. Before, the second sweep found the nodes confirmed and dropped
// the workflow with the replica still paused: a failover then lost the confirmations for good.
func TestDurableSweepKeepsTheNodesUntilTheReplicaHoldsThem(t *testing.T) {
	t.Parallel()
	master, replica := replicated(t)
	db := redistest.DB{Server: master, Client: master.Client(t, 0)}
	lost := &nodesLost{}
	worker := redis.NewClient(db.Client.Options())
	worker.AddHook(lost)
	t.Cleanup(func() { _ = worker.Close() })
	h := newHarnessOn(t, db, worker, Config{DurableReplicas: 1, DurableTimeout: 300 * time.Millisecond}, func(s *Stack) {
		// Its queue is not served: the test reads the records, nothing runs.
		s.Register(TaskConfig{Type: "later", Queue: "not-served"}, func(context.Context, *Job) error { return nil })
	})
	c, err := h.stack.EnqueueWorkflow(bg, WorkflowSpec{Tenant: "t1", Nodes: []WorkflowNode{{ID: "a", Spec: Spec{Type: "later"}}},
		Finally: func(context.Context, redis.Pipeliner, WorkflowCreated) { lost.stage.Store(1) }})
	// Created and said so, with its nodes' WAIT (lost with their confirmation) not acknowledged.
	if !errors.Is(err, ErrNotDurable) || c.ID == "" || lost.stage.Load() != 3 {
		t.Fatalf("a workflow whose nodes' confirmation was lost: %+v %v (hook stage %d)", c, err, lost.stage.Load())
	}
	k, _ := h.stack.Store().Keys(c.Jobs["a"], "")
	unconfirmed := func() bool {
		ids, err := h.stack.Store().WorkflowsUnconfirmed(bg, 10)
		return err == nil && slices.Contains(ids, c.ID)
	}

	resume := replica.Stall(t)
	for sweep := 1; sweep <= 2; sweep++ {
		if _, err := h.stack.SweepWorkflows(bg); !errors.Is(err, ErrNotDurable) {
			t.Fatalf("sweep %d with the replica paused: %v, want its WAIT refused", sweep, err)
		}
		if got := db.Client.HGet(bg, k.Record, jobstore.FieldConfirmed).Val(); got != "1" || !unconfirmed() {
			t.Fatalf("after sweep %d with the replica paused: confirmed %q on the master, in the set %v; want 1, true",
				sweep, got, unconfirmed())
		}
	}

	resume()
	rc := replica.Client(t, 0)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := h.stack.SweepWorkflows(bg)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sweep with the replica back: %v", err)
		}
	}
	if unconfirmed() || rc.HGet(bg, k.Record, jobstore.FieldConfirmed).Val() != "1" {
		t.Fatalf("with the replica back: in the set %v, the replica's confirmed %q; want false, 1",
			unconfirmed(), rc.HGet(bg, k.Record, jobstore.FieldConfirmed).Val())
	}
}
