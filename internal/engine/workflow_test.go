package engine

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// wfBundle is a harness whose task types record each run: "ok" succeeds (its result is its
// payload), "fail" fails for good, "wait" blocks until its context ends.
type wfBundle struct {
	*harness
	mu   sync.Mutex
	runs map[string]int // payload -> runs
	// parents holds what each "ok" run read of its parents, by payload.
	parents map[string]map[string]ParentResult
}

func newWFBundle(t *testing.T) *wfBundle {
	t.Helper()
	b := &wfBundle{runs: map[string]int{}, parents: map[string]map[string]ParentResult{}}
	b.harness = newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "ok"}, func(ctx context.Context, j *Job) error {
			p, err := s.ParentResults(ctx, j.ID)
			if err != nil {
				return err
			}
			b.mu.Lock()
			b.runs[string(j.Payload)]++
			b.parents[string(j.Payload)] = p
			b.mu.Unlock()
			j.SetResult("result of " + string(j.Payload))
			return nil
		})
		s.Register(TaskConfig{Type: "fail", MaxAttempts: 1}, func(ctx context.Context, j *Job) error {
			b.mu.Lock()
			b.runs[string(j.Payload)]++
			b.mu.Unlock()
			return Permanent(errors.New("broken"))
		})
		s.Register(TaskConfig{Type: "wait"}, func(ctx context.Context, j *Job) error {
			<-ctx.Done()
			return context.Cause(ctx)
		})
	})
	return b
}

func node(id, typ string, parents ...string) WorkflowNode {
	return WorkflowNode{ID: id, Spec: Spec{Type: typ, Payload: []byte(id)}, Parents: parents}
}

func (b *wfBundle) create(nodes ...WorkflowNode) WorkflowCreated {
	b.t.Helper()
	c, err := b.stack.EnqueueWorkflow(bg, WorkflowSpec{Tenant: "t1", Nodes: nodes})
	if err != nil {
		b.t.Fatal(err)
	}
	return c
}

// waitWorkflow polls until workflow id has status, and returns its view.
func (b *wfBundle) waitWorkflow(id, status string) WorkflowView {
	b.t.Helper()
	var v WorkflowView
	eventually(b.t, 15*time.Second, "workflow "+status, func() bool {
		var err error
		v, err = b.stack.Workflow(bg, id)
		return err == nil && v.Status == status
	})
	return v
}

func statusOf(v WorkflowView, node string) jobstore.Status {
	for i, n := range v.Nodes {
		if n.ID == node {
			return v.NodeStatus[i]
		}
	}
	return "?"
}

func (b *wfBundle) runsOf(payload string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.runs[payload]
}

// A diamond: d waits for b and c, which wait for a; each runs once, after its parents, and d reads
// both parents' results.
func TestWorkflowDiamondReleasesOnTheLastParent(t *testing.T) {
	t.Parallel()
	b := newWFBundle(t)
	c := b.create(node("a", "ok"), node("b", "ok", "a"), node("c", "ok", "a"), node("d", "ok", "b", "c"))
	v := b.waitWorkflow(c.ID, "done")
	for _, n := range []string{"a", "b", "c", "d"} {
		if statusOf(v, n) != jobstore.StatusDone || b.runsOf(n) != 1 {
			t.Fatalf("node %s: %s, %d runs", n, statusOf(v, n), b.runsOf(n))
		}
	}
	b.mu.Lock()
	p := b.parents["d"]
	b.mu.Unlock()
	if len(p) != 2 || p["b"].Result != "result of b" || p["c"].Result != "result of c" || p["b"].JobID != c.Jobs["b"] {
		t.Fatalf("d read its parents as %+v", p)
	}
	if n, _ := b.rdb.ZCard(bg, b.stack.Store().WorkflowIndexKey()).Result(); n != 0 {
		t.Fatalf("a done workflow is still indexed (%d)", n)
	}
	if ttl := b.rdb.PTTL(bg, b.stack.Store().WorkflowKey(c.ID)).Val(); ttl <= 0 || ttl > b.stack.Store().Retention() {
		t.Fatalf("workflow hash TTL %s", ttl)
	}
}

// A failed parent skips what needed it, transitively, with the reason; a node with all_ended runs
// anyway; the workflow ends failed.
func TestWorkflowFailureSkipsTransitivelyUnlessAllEnded(t *testing.T) {
	t.Parallel()
	b := newWFBundle(t)
	cleanup := node("cleanup", "ok", "a")
	cleanup.Policy = jobstore.PolicyAllEnded
	c := b.create(node("a", "fail"), node("b", "ok", "a"), node("c", "ok", "b"), cleanup, node("x", "ok"))
	v := b.waitWorkflow(c.ID, "failed")
	want := map[string]jobstore.Status{"a": jobstore.StatusFailed, "b": jobstore.StatusSkipped, "c": jobstore.StatusSkipped,
		"cleanup": jobstore.StatusDone, "x": jobstore.StatusDone}
	for n, st := range want {
		if got := statusOf(v, n); got != st {
			t.Fatalf("node %s: %s, want %s", n, got, st)
		}
	}
	if b.runsOf("b") != 0 || b.runsOf("c") != 0 || b.runsOf("cleanup") != 1 {
		t.Fatalf("runs: b %d c %d cleanup %d", b.runsOf("b"), b.runsOf("c"), b.runsOf("cleanup"))
	}
	jb, _ := b.stack.Get(bg, c.Jobs["b"])
	jc, _ := b.stack.Get(bg, c.Jobs["c"])
	if !strings.Contains(jb.Record.LastError, "parent a ended failed") || !strings.Contains(jc.Record.LastError, "parent b ended skipped") {
		t.Fatalf("skip reasons: %q, %q", jb.Record.LastError, jc.Record.LastError)
	}
}

// Cancelling a workflow cancels its running and held nodes; nothing is released after.
func TestWorkflowCancelCascades(t *testing.T) {
	t.Parallel()
	b := newWFBundle(t)
	c := b.create(node("a", "wait"), node("b", "ok", "a"), node("c", "ok", "b"))
	b.waitStatus(c.Jobs["a"], "processing", 10*time.Second)
	if err := b.stack.CancelWorkflow(bg, c.ID); err != nil {
		t.Fatal(err)
	}
	v := b.waitWorkflow(c.ID, "cancelled")
	for _, n := range []string{"a", "b", "c"} {
		if statusOf(v, n) != jobstore.StatusCancelled {
			t.Fatalf("node %s: %s", n, statusOf(v, n))
		}
	}
	if err := b.stack.CancelWorkflow(bg, c.ID); !errors.Is(err, ErrWorkflowEnded) {
		t.Fatalf("second cancel: %v", err)
	}
	time.Sleep(300 * time.Millisecond) // a release would have delivered by now
	if b.runsOf("b") != 0 || b.runsOf("c") != 0 {
		t.Fatal("a node of a cancelled workflow ran")
	}
}

// The process that ended a parent died before telling the workflow: the sweepers' passes (two
// at once) release the child, which runs once, and each edge is counted once.
func TestWorkflowSweeperRepairsALostRelease(t *testing.T) {
	t.Parallel()
	b := newWFBundle(t)
	c := b.create(node("a", "wait"), node("b", "ok", "a"))
	b.waitStatus(c.Jobs["a"], "processing", 10*time.Second)
	// a ends as its finish would write it, and nobody tells the workflow.
	ka, _ := b.stack.Store().Keys(c.Jobs["a"], "")
	b.rdb.HSet(bg, ka.Record, "status", "done")
	kb, _ := b.stack.Store().Keys(c.Jobs["b"], "")
	if st, _ := b.stack.Store().Status(bg, kb); st != jobstore.StatusHeld {
		t.Fatalf("b before the sweep: %s", st)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := b.stack.SweepWorkflows(bg); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	b.waitWorkflow(c.ID, "done")
	if _, err := b.stack.SweepWorkflows(bg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // a second delivery would have run by now
	if n := b.runsOf("b"); n != 1 {
		t.Fatalf("b ran %d times", n)
	}
	if p, _ := b.rdb.HGet(bg, b.stack.Store().WorkflowKey(c.ID), "p:b").Int(); p != 0 {
		t.Fatalf("b's pending parents after the sweeps: %d, want 0 (each edge counted once)", p)
	}
}

// Creation refuses what can never run, naming the node and the field.
func TestWorkflowValidation(t *testing.T) {
	t.Parallel()
	b := newWFBundle(t)
	policy := node("b", "ok", "a")
	policy.Policy = "sometimes"
	cases := []struct {
		name        string
		nodes       []WorkflowNode
		node, field string
	}{
		{"cycle", []WorkflowNode{node("a", "ok", "c"), node("b", "ok", "a"), node("c", "ok", "b")}, "a", "parents"},
		{"self", []WorkflowNode{node("a", "ok", "a")}, "a", "parents"},
		{"unknown parent", []WorkflowNode{node("a", "ok"), node("b", "ok", "z")}, "b", "parents"},
		{"duplicate id", []WorkflowNode{node("a", "ok"), node("a", "ok")}, "a", "id"},
		{"bad id", []WorkflowNode{node("a b", "ok")}, "a b", "id"},
		{"unknown type", []WorkflowNode{node("a", "ok"), node("b", "nope", "a")}, "b", "type"},
		{"policy", []WorkflowNode{node("a", "ok"), policy}, "b", "policy"},
		{"empty", nil, "", "nodes"},
	}
	for _, tc := range cases {
		_, err := b.stack.EnqueueWorkflow(bg, WorkflowSpec{Tenant: "t1", Nodes: tc.nodes})
		var we *WorkflowError
		if !errors.As(err, &we) || !errors.Is(err, ErrInvalidWorkflow) || we.Node != tc.node || we.Field != tc.field {
			t.Errorf("%s: %v (%+v)", tc.name, err, we)
		}
	}
	big := make([]WorkflowNode, MaxWorkflowNodes+1)
	for i := range big {
		big[i] = node("n"+strings.Repeat("x", i%3)+string(rune('a'+i%26))+strconv.Itoa(i), "ok")
	}
	if _, err := b.stack.EnqueueWorkflow(bg, WorkflowSpec{Nodes: big}); !errors.Is(err, ErrInvalidWorkflow) {
		t.Errorf("1,001 nodes: %v", err)
	}
	if keys, _ := b.rdb.Keys(bg, "jobguard:*").Result(); len(keys) != 0 {
		t.Errorf("refused workflows left keys: %v", keys)
	}
}

// A batch's callbacks run once each: on_success and on_complete when every job is done; with a
// failed job on_success ends skipped and on_complete still runs; the counters say so.
func TestBatchCallbacksRunOnce(t *testing.T) {
	t.Parallel()
	b := newWFBundle(t)
	spec := func(typ, payload string) *Spec { return &Spec{Type: typ, Payload: []byte(payload)} }
	ok, err := b.stack.EnqueueBatch(bg, BatchSpec{Tenant: "t1",
		Jobs:      []Spec{*spec("ok", "j1"), *spec("ok", "j2"), *spec("ok", "j3")},
		OnSuccess: spec("ok", "ok-success"), OnComplete: spec("ok", "ok-complete")})
	if err != nil {
		t.Fatal(err)
	}
	mixed, err := b.stack.EnqueueBatch(bg, BatchSpec{Tenant: "t1",
		Jobs:      []Spec{*spec("ok", "m1"), *spec("fail", "m2")},
		OnSuccess: spec("ok", "mixed-success"), OnComplete: spec("ok", "mixed-complete")})
	if err != nil {
		t.Fatal(err)
	}
	b.waitWorkflow(ok.ID, "done")
	b.waitWorkflow(mixed.ID, "failed")
	// Every sweep after the end changes nothing.
	if _, err := b.stack.SweepWorkflows(bg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	for p, want := range map[string]int{"ok-success": 1, "ok-complete": 1, "mixed-success": 0, "mixed-complete": 1} {
		if n := b.runsOf(p); n != want {
			t.Errorf("%s ran %d times, want %d", p, n, want)
		}
	}
	v, err := b.stack.Batch(bg, mixed.ID)
	if err != nil {
		t.Fatal(err)
	}
	if v.Total != 2 || v.Done != 1 || v.Failed != 1 || v.Pending != 0 || v.OnSuccess.Status != jobstore.StatusSkipped ||
		v.OnComplete.Status != jobstore.StatusDone {
		t.Fatalf("mixed batch: %+v %+v %+v", v, v.OnSuccess, v.OnComplete)
	}
	b.mu.Lock()
	p := b.parents["ok-complete"]
	b.mu.Unlock()
	if len(p) != 3 || p["job-2"].Result != "result of j3" {
		t.Fatalf("the callback read its parents as %+v", p)
	}
}

// A process released a child (held -> queued) and died before asynq took its delivery: the
// reconciler delivers it (the job's first task id, with the workflow's header: its end tells the
// workflow), and it runs once.
func TestWorkflowReleasedButNotDeliveredIsDeliveredByTheReconciler(t *testing.T) {
	t.Parallel()
	b := newWFBundle(t)
	c := b.create(node("a", "wait"), node("b", "ok", "a"))
	b.waitStatus(c.Jobs["a"], "processing", 10*time.Second)
	store := b.stack.Store()
	ka, _ := store.Keys(c.Jobs["a"], "")
	b.rdb.HSet(bg, ka.Record, "status", "done")
	// What the dying process did: a's end noted (b decided), b released; then nothing.
	adv, err := store.WorkflowEnded(bg, c.ID, "a", jobstore.StatusDone, time.Now())
	if err != nil || len(adv.Decisions) != 1 || adv.Decisions[0].Action != "release" {
		t.Fatalf("a's end: %+v %v", adv, err)
	}
	if r, err := store.ReleaseNode(bg, c.Jobs["b"], time.Now(), false); err != nil || !r.Released {
		t.Fatalf("release: %+v %v", r, err)
	}
	// A sweep now finds b queued (not held): nothing to decide again, nothing delivered twice.
	if _, err := b.stack.SweepWorkflows(bg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if n := b.runsOf("b"); n != 0 {
		t.Fatalf("b ran %d times before its delivery", n)
	}
	rec := b.stack.NewReconciler(b.insp, b.client, ReconcilerConfig{Grace: time.Millisecond})
	if _, err := rec.Pass(bg); err != nil {
		t.Fatal(err)
	}
	b.waitWorkflow(c.ID, "done")
	if _, err := rec.Pass(bg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if n := b.runsOf("b"); n != 1 {
		t.Fatalf("b ran %d times", n)
	}
}
