package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// A sequence's job cancelled while running keeps its key until its handler returns: the sweep
// does not free its admission while the run may still be returning (it did, and the next job
// started beside the handler), and frees it once the cancel is older than the grace (the run's
// process died).
func TestACancelledRunsSequenceWaitsForItsHandler(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	started := map[string]time.Time{}
	returned := map[string]time.Time{}
	stopped := make(chan string, 2)
	release := map[string]chan struct{}{"a1": make(chan struct{}), "b1": make(chan struct{})}
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "seq-cancel", LeaseTTL: 3 * time.Second, Fair: &Fair{Sequence: true, Capacity: 4}},
			func(ctx context.Context, j *Job) error {
				step := string(j.Payload)
				mu.Lock()
				started[step] = time.Now()
				mu.Unlock()
				if ch, first := release[step]; first {
					<-ctx.Done() // the cancel, seen at the keeper's next renewal
					stopped <- step
					<-ch // a handler that takes its time to return
				}
				mu.Lock()
				returned[step] = time.Now()
				mu.Unlock()
				return nil
			})
	})
	startedAt := func(step string) (time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		at, ok := started[step]
		return at, ok
	}
	for _, key := range []string{"a", "b"} {
		first := h.enqueue(Spec{Type: "seq-cancel", Tenant: key, Payload: []byte(key + "1")})
		h.waitStatus(first, "processing", 5*time.Second)
		h.enqueue(Spec{Type: "seq-cancel", Tenant: key, Payload: []byte(key + "2")})
		if _, err := h.stack.Cancel(bg, first, CancelRequest{By: "test"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s1's handler never saw its cancel", key)
		}
		if key == "b" {
			// As if the cancel were older than the grace: b1's process died, say.
			keys, _ := h.stack.store.Keys(first, "")
			h.rdb.HSet(bg, keys.Record, jobstore.FieldCancelledRun, time.Now().Add(-time.Hour).UnixMilli())
		}
		for range 3 {
			if _, err := h.stack.SweepFair(bg); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		_, next := startedAt(key + "2")
		switch {
		case key == "a" && next:
			t.Fatal("a2 started while the cancelled a1's handler had not returned")
		case key == "b" && !next:
			t.Fatal("b2 did not start: the sweep kept the admission of a cancel older than the grace")
		}
		close(release[key+"1"])
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		at, ok := startedAt("a2")
		if ok {
			mu.Lock()
			before := at.Before(returned["a1"])
			mu.Unlock()
			if before {
				t.Fatal("a2 started before a1's handler returned")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a2 never started after a1's handler returned")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A sequence's job cancelled under a handler that returns before its run sees the cancel (its
// finish refused as stale, its context never cancelled) frees its key at that return, not after
// the sweep's grace (twice the lease TTL: a minute here).
func TestACancelledRunReturningAtOnceFreesItsKey(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	next := make(chan struct{})
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "seq-cancel-quick", LeaseTTL: 30 * time.Second, Fair: &Fair{Sequence: true, Capacity: 4}},
			func(ctx context.Context, j *Job) error {
				if string(j.Payload) == "first" {
					<-release // returns while the keeper has not renewed yet (every 10 s)
					return nil
				}
				close(next)
				return nil
			})
	})
	first := h.enqueue(Spec{Type: "seq-cancel-quick", Tenant: "k", Payload: []byte("first")})
	h.waitStatus(first, "processing", 5*time.Second)
	second := h.enqueue(Spec{Type: "seq-cancel-quick", Tenant: "k", Payload: []byte("second")})
	if _, err := h.stack.Cancel(bg, first, CancelRequest{By: "test"}); err != nil {
		t.Fatal(err)
	}
	close(release)
	select {
	case <-next:
	case <-time.After(10 * time.Second):
		t.Fatal("the key's next job did not start after the cancelled handler returned")
	}
	h.waitStatus(second, "done", 5*time.Second)
}

// A job cancelled while it waits in its key's list leaves the key's backlog at the cancel (it
// stayed counted until its turn came), the key's next jobs keep their order, and nothing of the
// withdrawal is left once the admission has passed over it.
func TestACancelledWaitingJobLeavesItsBacklogAtOnce(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var mu sync.Mutex
	var ran []string
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "seq-withdraw", Fair: &Fair{Sequence: true, Capacity: 4}},
			func(ctx context.Context, j *Job) error {
				if string(j.Payload) == "first" {
					<-release
				}
				mu.Lock()
				ran = append(ran, string(j.Payload))
				mu.Unlock()
				return nil
			})
	})
	tc, _ := h.stack.TaskConfig("seq-withdraw")
	sh := h.stack.fairShardOf(tc, "k")
	backlog := func() int64 {
		c, err := h.stack.store.FairKeyCounts(bg, "k", sh)
		if err != nil {
			t.Fatal(err)
		}
		return c.Backlog
	}
	first := h.enqueue(Spec{Type: "seq-withdraw", Tenant: "k", Payload: []byte("first")})
	h.waitStatus(first, "processing", 5*time.Second)
	w := make([]string, 4)
	for i := range w {
		w[i] = h.enqueue(Spec{Type: "seq-withdraw", Tenant: "k", Payload: []byte{'w', byte('0' + i)}})
	}
	if got := backlog(); got != 4 {
		t.Fatalf("backlog %d before the cancels, want 4", got)
	}
	for i, id := range []string{w[1], w[0], w[3]} {
		if _, err := h.stack.Cancel(bg, id, CancelRequest{By: "test"}); err != nil {
			t.Fatal(err)
		}
		if got, want := backlog(), int64(3-i); got != want {
			t.Fatalf("backlog %d after %d cancels, want %d", got, i+1, want)
		}
	}
	if _, err := h.stack.Cancel(bg, w[1], CancelRequest{By: "test"}); err == nil {
		t.Fatal("a second cancel of a waiting job was not refused")
	}
	if got := backlog(); got != 1 {
		t.Fatalf("backlog %d after a cancel repeated, want 1", got)
	}
	close(release)
	h.waitStatus(w[2], "done", 10*time.Second)
	mu.Lock()
	got := append([]string(nil), ran...)
	mu.Unlock()
	if len(got) != 2 || got[0] != "first" || got[1] != "w2" {
		t.Fatalf("ran %q, want first then w2 (the cancelled never run)", got)
	}
	k := h.stack.store.FairKeys(sh)
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := h.rdb.Exists(bg, k.Withdrawn, k.WaitPrefix+"k", k.Backlog).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the withdrawn hash, the key's list and the backlog left behind", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A released workflow node cancelled while it waits for its key (its record names no fair key:
// its wait names it in the once hash, and the withdrawal looks in every shard) leaves the key's
// backlog at the cancel too.
func TestACancelledWaitingNodeLeavesItsBacklogAtOnce(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	h := newHarness(t, Config{Concurrency: 4}, func(s *Stack) {
		s.Register(TaskConfig{Type: "seq-wf-withdraw", Fair: &Fair{Sequence: true, Capacity: 4, Shards: 2,
			Key: func(spec Spec) string { return string(spec.Payload[:1]) }}},
			func(ctx context.Context, j *Job) error {
				if string(j.Payload) == "k-hold" {
					<-release
				}
				return nil
			})
	})
	hold := h.enqueue(Spec{Type: "seq-wf-withdraw", Tenant: "t", Payload: []byte("k-hold")})
	h.waitStatus(hold, "processing", 5*time.Second)
	c, err := h.stack.EnqueueWorkflow(bg, WorkflowSpec{Tenant: "t", Nodes: []WorkflowNode{
		{ID: "root", Spec: Spec{Type: "seq-wf-withdraw", Payload: []byte("o-root")}},
		{ID: "child", Spec: Spec{Type: "seq-wf-withdraw", Payload: []byte("k-child")}, Parents: []string{"root"}}}})
	if err != nil {
		t.Fatal(err)
	}
	child := h.waitStatus(c.Jobs["child"], "waiting", 5*time.Second)
	if child.Raw[jobstore.FieldFairKey] != "" {
		t.Fatalf("the released node's record names its key %q: the test needs one that does not", child.Raw[jobstore.FieldFairKey])
	}
	after := h.enqueue(Spec{Type: "seq-wf-withdraw", Tenant: "t", Payload: []byte("k-after")})
	backlog := func() int64 {
		tc, _ := h.stack.TaskConfig("seq-wf-withdraw")
		n, err := h.stack.store.FairKeyCounts(bg, "k", h.stack.fairShardOf(tc, "k"))
		if err != nil {
			t.Fatal(err)
		}
		return n.Backlog
	}
	if n := backlog(); n != 2 {
		t.Fatalf("k's backlog %d before the cancel, want 2", n)
	}
	if _, err := h.stack.Cancel(bg, c.Jobs["child"], CancelRequest{By: "test"}); err != nil {
		t.Fatal(err)
	}
	if n := backlog(); n != 1 {
		t.Fatalf("k's backlog %d after the node's cancel, want 1", n)
	}
	close(release)
	h.waitStatus(after, "done", 10*time.Second)
	waitFairIdle(t, h, "seq-wf-withdraw")
}

// A waiting job that expires (its start_by passed while it waited for its key) leaves the key's
// backlog at the expiry, as a cancelled one does.
func TestAnExpiredWaitingJobLeavesItsBacklogAtOnce(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	release := make(chan struct{})
	h := newHarness(t, Config{Clock: clk}, func(s *Stack) {
		s.Register(TaskConfig{Type: "seq-expire", Fair: &Fair{Sequence: true, Capacity: 4}},
			func(ctx context.Context, j *Job) error {
				if string(j.Payload) == "hold" {
					<-release
				}
				return nil
			})
	})
	hold := h.enqueue(Spec{Type: "seq-expire", Tenant: "k", Payload: []byte("hold")})
	h.waitStatus(hold, "processing", 5*time.Second)
	late := h.enqueue(Spec{Type: "seq-expire", Tenant: "k", Payload: []byte("late"), StartBy: clk.Now().Add(time.Minute)})
	if c, err := h.stack.FairCounts(bg, "seq-expire", 10); err != nil || len(c.TopKeys) != 1 || c.TopKeys[0].Backlog != 1 {
		t.Fatalf("top keys %+v (%v) before the expiry, want k waiting 1", c.TopKeys, err)
	}
	clk.Advance(2 * time.Minute)
	if n, err := h.stack.ExpireDue(bg); n != 1 || err != nil {
		t.Fatalf("the sweep expired %d jobs (%v), want 1", n, err)
	}
	h.waitStatus(late, "expired", time.Second)
	counts, err := h.stack.FairCounts(bg, "seq-expire", 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range counts.TopKeys {
		if c.Backlog != 0 {
			t.Fatalf("top keys %+v after the expiry, want no backlog", counts.TopKeys)
		}
	}
	close(release)
	h.waitStatus(hold, "done", 10*time.Second)
	waitFairIdle(t, h, "seq-expire")
}
