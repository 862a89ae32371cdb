package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// nodesLost lets a workflow's confirmation through, then drops the next pipeline of scripts
// sent on the client (its nodes' confirmation), as a Redis that failed just after the decision,
// or a process that died then, would.
type nodesLost struct {
	testsupport.PipelinesOnly
	stage atomic.Int32 // 1: armed by Finally; 2: the workflow's went; 3: dropped
}

func (h *nodesLost) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		switch {
		case h.stage.Load() == 1 && hasCommand(cmds, confirmsWorkflow):
			err := next(ctx, cmds)
			h.stage.Store(2)
			return err
		case h.stage.Load() == 2 && hasCommand(cmds, func(c redis.Cmder) bool { return strings.HasPrefix(c.Name(), "eval") }):
			h.stage.Store(3)
			for _, c := range cmds {
				c.SetErr(errors.New("connection reset"))
			}
			return errors.New("connection reset")
		}
		return next(ctx, cmds)
	}
}

// confirmsWorkflow tells a workflow's confirmation (wf_confirm: EVAL script 1 <hash>).
func confirmsWorkflow(c redis.Cmder) bool {
	args := c.Args()
	return c.Name() == "eval" && len(args) > 3 && fmt.Sprint(args[2]) == "1" && strings.HasSuffix(fmt.Sprint(args[3]), "}:wf")
}

func hasCommand(cmds []redis.Cmder, is func(redis.Cmder) bool) bool {
	for _, c := range cmds {
		if is(c) {
			return true
		}
	}
	return false
}

// A workflow's confirmation is one decision: a workflow whose nodes' confirmation was lost after
// its own is created (the caller is told so), and the workflow sweep confirms its nodes, with 100
// older workflows running. Each node's confirmation checked the deadline on its own before, so a
// Redis stall that split them confirmed the workflow and some nodes, and refused the rest.
func TestWorkflowNodesLostAfterTheDecisionAreConfirmedByTheSweep(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	lost := &nodesLost{}
	worker := redis.NewClient(db.Client.Options())
	worker.AddHook(lost)
	t.Cleanup(func() { _ = worker.Close() })
	h := newHarnessOn(t, db, worker, Config{}, func(s *Stack) {
		// Its queue is not served: the test reads the records, nothing runs.
		s.Register(TaskConfig{Type: "later", Queue: "not-served"}, func(context.Context, *Job) error { return nil })
	})
	// More running workflows than a sweep reads of the index (100, the oldest first): the sweep
	// reads the workflows whose nodes are unconfirmed first, whatever their age.
	for i := range workflowSweepBatch {
		if _, err := h.stack.EnqueueWorkflow(bg, WorkflowSpec{Tenant: "t1", Nodes: []WorkflowNode{
			{ID: "old", Spec: Spec{Type: "later", Payload: []byte{byte(i)}}}}}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := h.stack.EnqueueWorkflow(bg, WorkflowSpec{Tenant: "t1", Nodes: []WorkflowNode{
		{ID: "a", Spec: Spec{Type: "later"}}, {ID: "b", Spec: Spec{Type: "later"}, Parents: []string{"a"}}},
		Finally: func(context.Context, redis.Pipeliner, WorkflowCreated) { lost.stage.Store(1) }})
	if err != nil {
		t.Fatalf("a workflow whose nodes' confirmation was lost after its own: %v, want created", err)
	}
	if lost.stage.Load() != 3 {
		t.Fatalf("the hook did not drop the nodes' confirmation (stage %d)", lost.stage.Load())
	}
	confirmed := func() []string {
		var out []string
		for _, node := range []string{"a", "b"} {
			k, _ := h.stack.Store().Keys(c.Jobs[node], "")
			out = append(out, h.rdb.HGet(bg, k.Record, jobstore.FieldConfirmed).Val())
		}
		return out
	}
	if got := confirmed(); got[0] != "0" || got[1] != "0" {
		t.Fatalf("the nodes' records before the sweep: confirmed %v, want 0 0", got)
	}
	if v, err := h.stack.Workflow(bg, c.ID); err != nil || v.Status != "running" {
		t.Fatalf("the workflow before the sweep: %+v %v", v, err)
	}
	if _, err := h.stack.SweepWorkflows(bg); err != nil {
		t.Fatal(err)
	}
	if got := confirmed(); got[0] != "1" || got[1] != "1" {
		t.Fatalf("the nodes' records after the sweep: confirmed %v, want 1 1", got)
	}
	k, _ := h.stack.Store().Keys(c.Jobs["a"], "")
	if ttl := h.rdb.PTTL(bg, k.Record).Val(); ttl < time.Hour {
		t.Fatalf("a confirmed node's record lives %s, want its retention", ttl)
	}
}

// decisionLost loses the answer of the next workflow confirmation: sent (its reply lost) or not.
type decisionLost struct {
	testsupport.PipelinesOnly
	armed atomic.Bool
	send  bool
}

func (h *decisionLost) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !hasCommand(cmds, confirmsWorkflow) || !h.armed.CompareAndSwap(true, false) {
			return next(ctx, cmds)
		}
		if h.send {
			_ = next(ctx, cmds)
		}
		for _, c := range cmds {
			c.SetErr(errors.New("i/o timeout"))
		}
		return errors.New("i/o timeout")
	}
}

// A workflow whose decision's answer was lost is settled once its deadline has passed, not left
// to run out in 2 minutes (its deliveries bouncing, a fair type's roots holding their keys): its
// nodes are confirmed when the decision had landed, abandoned when it had not.
func TestAWorkflowWhoseDecisionWasLostIsSettledAfterItsDeadline(t *testing.T) {
	t.Parallel()
	for _, landed := range []bool{true, false} {
		t.Run(fmt.Sprint("landed=", landed), func(t *testing.T) {
			t.Parallel()
			db := redistest.NewDB(t)
			lost := &decisionLost{send: landed}
			worker := redis.NewClient(db.Client.Options())
			worker.AddHook(lost)
			t.Cleanup(func() { _ = worker.Close() })
			h := newHarnessOn(t, db, worker, Config{}, func(s *Stack) {
				s.Register(TaskConfig{Type: "later", Queue: "not-served"}, func(context.Context, *Job) error { return nil })
			})
			lost.armed.Store(true)
			ctx, cancel := context.WithTimeout(bg, time.Second)
			defer cancel()
			var wfID string
			_, err := h.stack.EnqueueWorkflow(ctx, WorkflowSpec{Tenant: "t1", Nodes: []WorkflowNode{
				{ID: "a", Spec: Spec{Type: "later", Payload: []byte("a")}}},
				Finally: func(_ context.Context, _ redis.Pipeliner, c WorkflowCreated) { wfID = c.ID }})
			if !errors.Is(err, ErrOutcomeUnknown) {
				t.Fatalf("a workflow whose decision's answer was lost: %v, want ErrOutcomeUnknown", err)
			}
			records := func() []string { return h.rdb.Keys(bg, "jobguard:*:job:*").Val() }
			if n := len(records()); n != 1 {
				t.Fatalf("%d node records at the answer, want 1 (nothing abandoned yet)", n)
			}
			eventually(t, 10*time.Second, "the workflow settled", func() bool {
				r := records()
				if !landed {
					return len(r) == 0
				}
				return len(r) == 1 && h.rdb.HGet(bg, r[0], jobstore.FieldConfirmed).Val() == "1"
			})
			if landed {
				return
			}
			// A confirmation that reaches Redis only now (a clock ahead of Redis's made the
			// settlement's wait too short) finds the workflow taken back: it cannot run without
			// its abandoned nodes.
			var c jobstore.WorkflowConfirmation
			if _, err := h.rdb.Pipelined(bg, func(pipe redis.Pipeliner) error {
				c = h.stack.Store().QueueWorkflowConfirm(bg, pipe, wfID, 0)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if st, err := c.Result(); err != nil || st != "gone" {
				t.Fatalf("a confirmation after the settlement: %s %v, want gone", st, err)
			}
		})
	}
}

// The sweep leaves a claim's entries in the index and in the set of unconfirmed workflows: they
// are written with the claim, before its confirmation (on a cluster, on another master than its
// hash). It dropped them, reading the claim as gone, and the workflow, once confirmed, was never
// swept (its nodes left unconfirmed ran out). Once the hash is gone, they go.
func TestTheSweepKeepsAClaimedWorkflowsEntries(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, func(*Stack) {})
	store := h.stack.Store()
	id := jobstore.NewWorkflowID(time.Now())
	// A claim and its entries, written with it, before its confirmation.
	pipe := h.rdb.Pipeline()
	store.QueueWorkflowCreate(bg, pipe, jobstore.NewWorkflow{ID: id, Tenant: "t1", Kind: "workflow", Now: time.Now(),
		ClaimTTL: time.Minute, Nodes: []jobstore.WorkflowNode{{ID: "a", JobID: NewJobID("a", time.Now())}}})
	written := store.QueueWorkflowEntries(bg, pipe, id, time.Now())
	if _, err := pipe.Exec(bg); err != nil || written.Err() != nil {
		t.Fatal(err, written.Err())
	}
	entries := func() (indexed, unconfirmed bool) {
		running, err := store.RunningWorkflows(bg, 10)
		if err != nil {
			t.Fatal(err)
		}
		pending, err := store.WorkflowsUnconfirmed(bg, 10)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Contains(running, id), slices.Contains(pending, id)
	}
	if _, err := h.stack.SweepWorkflows(bg); err != nil {
		t.Fatal(err)
	}
	if indexed, unconfirmed := entries(); !indexed || !unconfirmed {
		t.Fatalf("a claim's entries after a sweep: indexed %v, unconfirmed %v, want both kept", indexed, unconfirmed)
	}
	h.rdb.Del(bg, store.WorkflowKey(id)) // its claim ran out
	if _, err := h.stack.SweepWorkflows(bg); err != nil {
		t.Fatal(err)
	}
	if indexed, unconfirmed := entries(); indexed || unconfirmed {
		t.Fatalf("a gone workflow's entries after a sweep: indexed %v, unconfirmed %v, want both dropped", indexed, unconfirmed)
	}
}

// entriesLost fails the next pipeline's writes to the {workflows} slot (its master failed over),
// the rest of it having run.
type entriesLost struct {
	testsupport.PipelinesOnly
	armed atomic.Bool
}

func (h *entriesLost) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		inWorkflows := func(c redis.Cmder) bool {
			args := c.Args()
			return c.Name() == "zadd" && len(args) > 1 && strings.Contains(fmt.Sprint(args[1]), "{workflows}")
		}
		if !hasCommand(cmds, inWorkflows) || !h.armed.CompareAndSwap(true, false) {
			return err
		}
		for _, c := range cmds {
			if inWorkflows(c) {
				c.SetErr(errors.New("MOVED 1234 10.0.0.3:6379"))
			}
		}
		return err
	}
}

// A workflow whose entries (the index, the set of workflows with unconfirmed nodes) were not
// written is not created: written after the confirmation, on a cluster's other master, they could
// be lost while the confirmation took, and nodes a failure then left unconfirmed were confirmed
// by nothing. Nothing of it is left.
func TestAWorkflowWhoseEntriesWereNotWrittenIsNotCreated(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	lost := &entriesLost{}
	worker := redis.NewClient(db.Client.Options())
	worker.AddHook(lost)
	t.Cleanup(func() { _ = worker.Close() })
	h := newHarnessOn(t, db, worker, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "later", Queue: "not-served"}, func(context.Context, *Job) error { return nil })
	})
	lost.armed.Store(true)
	_, err := h.stack.EnqueueWorkflow(bg, WorkflowSpec{Tenant: "t1", Nodes: []WorkflowNode{
		{ID: "a", Spec: Spec{Type: "later"}}, {ID: "b", Spec: Spec{Type: "later"}, Parents: []string{"a"}}}})
	if err == nil || lost.armed.Load() {
		t.Fatalf("a workflow whose entries were lost: %v (hook armed still: %v), want an error", err, lost.armed.Load())
	}
	if keys := h.rdb.Keys(bg, "jobguard:*:job:*").Val(); len(keys) != 0 {
		t.Fatalf("node records left: %v", keys)
	}
	running, _ := h.stack.Store().RunningWorkflows(bg, 10)
	pending, _ := h.stack.Store().WorkflowsUnconfirmed(bg, 10)
	if len(running)+len(pending) != 0 {
		t.Fatalf("entries left: index %v, unconfirmed %v", running, pending)
	}
}

// settleFails fails every settlement of a workflow (wf_settle: a single EVAL/EVALSHA of its hash),
// as a process that died before it settled would leave it.
type settleFails struct{}

func (settleFails) DialHook(next redis.DialHook) redis.DialHook { return next }
func (settleFails) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (settleFails) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.HasPrefix(cmd.Name(), "eval") && confirmsWorkflow(redis.NewCmd(ctx, append([]any{"eval"}, cmd.Args()[1:]...)...)) {
			cmd.SetErr(errors.New("connection reset"))
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

// A node of a workflow that was never created (its decision's answer lost, and its process gone
// before it settled) is abandoned at its delivery once the workflow's claim is gone, not bounced
// until its record runs out 2 minutes later: a fair root held its type's capacity that long, and a
// probe saw the whole type stop after one failed creation.
func TestAnOrphanNodeIsAbandonedAtItsDelivery(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	lost := &decisionLost{send: false}
	worker := redis.NewClient(db.Client.Options())
	worker.AddHook(lost)
	worker.AddHook(settleFails{})
	t.Cleanup(func() { _ = worker.Close() })
	var ran atomic.Int32
	h := newHarnessOn(t, db, worker, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "orphan", Fair: &Fair{Capacity: 1}}, func(context.Context, *Job) error {
			ran.Add(1)
			return nil
		})
	})
	lost.armed.Store(true)
	ctx, cancel := context.WithTimeout(bg, time.Second)
	defer cancel()
	_, err := h.stack.EnqueueWorkflow(ctx, WorkflowSpec{Tenant: "t1", Nodes: []WorkflowNode{{ID: "a", Spec: Spec{Type: "orphan", Tenant: "t1"}}}})
	if !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("a workflow whose decision was lost: %v, want ErrOutcomeUnknown", err)
	}
	// The node holds the type's one place; the next job of the type waits behind it.
	next := h.enqueue(Spec{Type: "orphan", Tenant: "t2"})
	h.waitStatus(next, "done", 20*time.Second)
	if keys := h.rdb.Keys(bg, "jobguard:*:job:*").Val(); len(keys) != 1 {
		t.Fatalf("records left: %v, want the next job's only", keys)
	}
	if n := ran.Load(); n != 1 {
		t.Fatalf("%d runs, want 1 (the orphan never runs)", n)
	}
}
