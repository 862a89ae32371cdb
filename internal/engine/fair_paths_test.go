package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// seqRecorder is a sequence type's handler that records each key's run order and counts runs
// that overlapped another of their key.
type seqRecorder struct {
	mu       sync.Mutex
	order    map[string][]string
	running  map[string]int
	overlaps int
}

func newSeqRecorder() *seqRecorder {
	return &seqRecorder{order: map[string][]string{}, running: map[string]int{}}
}

func (r *seqRecorder) handle(ctx context.Context, j *Job) error {
	key, step := string(j.Payload[:1]), string(j.Payload)
	r.mu.Lock()
	r.running[key]++
	if r.running[key] > 1 {
		r.overlaps++
	}
	r.mu.Unlock()
	time.Sleep(2 * time.Millisecond)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running[key]--
	r.order[key] = append(r.order[key], step)
	return nil
}

func (r *seqRecorder) check(t *testing.T, key string, want []string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Equal(r.order[key], want) {
		t.Errorf("key %s ran %v, want %v", key, r.order[key], want)
	}
	if r.overlaps != 0 {
		t.Errorf("%d runs overlapped another of their key", r.overlaps)
	}
}

// A sequence key's bulk and single enqueues, interleaved, all wait for their turn: they run one
// at a time, in the order they were enqueued, and the bulk's items answer Waiting.
func TestFairBulkAndSingleEnqueuesKeepTheSequence(t *testing.T) {
	t.Parallel()
	rec := newSeqRecorder()
	h := newHarness(t, Config{Concurrency: 4}, func(s *Stack) {
		s.Register(TaskConfig{Type: "seq-bulk", Fair: &Fair{Sequence: true, Capacity: 4}}, rec.handle)
	})
	var want []string
	var last string
	step := 0
	single := func() {
		p := fmt.Sprintf("k%02d", step)
		step++
		want = append(want, p)
		last = h.enqueue(Spec{Type: "seq-bulk", Tenant: "k", Payload: []byte(p)})
	}
	bulk := func(n int, atomic bool) {
		var specs []Spec
		for range n {
			p := fmt.Sprintf("k%02d", step)
			step++
			want = append(want, p)
			specs = append(specs, Spec{Type: "seq-bulk", Tenant: "k", Payload: []byte(p)})
		}
		for i, it := range h.stack.EnqueueMany(bg, specs, atomic) {
			if it.Err != nil || !it.Waiting {
				t.Fatalf("bulk item %d: %+v, want a waiting job", i, it)
			}
			last = it.JobID
		}
	}
	single()
	bulk(5, false)
	single()
	bulk(4, true)
	single()
	h.waitStatus(last, "done", 30*time.Second)
	rec.check(t, "k", want)
	waitFairIdle(t, h, "seq-bulk")
}

// A workflow's nodes of a sequence type wait for their key like any job of it: the root waits
// behind the key's running job, and the child, released when the root ends, waits behind the
// job enqueued meanwhile. One at a time, in the order they joined the key.
func TestFairWorkflowNodesWaitForTheirKey(t *testing.T) {
	t.Parallel()
	rec := newSeqRecorder()
	release := make(chan struct{})
	h := newHarness(t, Config{Concurrency: 4}, func(s *Stack) {
		s.Register(TaskConfig{Type: "seq-wf", Fair: &Fair{Sequence: true, Capacity: 4}}, func(ctx context.Context, j *Job) error {
			if string(j.Payload) == "k0-hold" {
				<-release
			}
			return rec.handle(ctx, j)
		})
	})
	hold := h.enqueue(Spec{Type: "seq-wf", Tenant: "k", Payload: []byte("k0-hold")})
	h.waitStatus(hold, "processing", 5*time.Second)
	c, err := h.stack.EnqueueWorkflow(bg, WorkflowSpec{Tenant: "k", Nodes: []WorkflowNode{
		{ID: "a", Spec: Spec{Type: "seq-wf", Payload: []byte("k1-root")}},
		{ID: "b", Spec: Spec{Type: "seq-wf", Payload: []byte("k3-child")}, Parents: []string{"a"}}}})
	if err != nil {
		t.Fatal(err)
	}
	v := h.waitStatus(c.Jobs["a"], "waiting", time.Second)
	if !has(v, "waiting") {
		t.Fatalf("the root's timeline %v has no waiting event", events(v))
	}
	between := h.enqueue(Spec{Type: "seq-wf", Tenant: "k", Payload: []byte("k2-single")})
	close(release)
	h.waitStatus(c.Jobs["b"], "done", 10*time.Second)
	h.waitStatus(between, "done", time.Second)
	rec.check(t, "k", []string{"k0-hold", "k1-root", "k2-single", "k3-child"})
	if v, _ := h.stack.Get(bg, c.Jobs["b"]); !has(v, "waiting") {
		t.Errorf("the released child's timeline %v has no waiting event", events(v))
	}
	waitFairIdle(t, h, "seq-wf")
}

// A replay of a sequence job that holds no admission (it failed and its key went on) waits for
// its key's turn: it stays waiting behind the key's running job and runs after it, alone.
func TestFairReplayWaitsForItsKey(t *testing.T) {
	t.Parallel()
	rec := newSeqRecorder()
	release := make(chan struct{})
	var failFirst atomic.Bool
	failFirst.Store(true)
	h := newHarness(t, Config{Concurrency: 4}, func(s *Stack) {
		s.Register(TaskConfig{Type: "seq-replay-wait", MaxAttempts: 1, Fair: &Fair{Sequence: true, Capacity: 4}},
			func(ctx context.Context, j *Job) error {
				switch {
				case string(j.Payload) == "k0-first" && failFirst.Load():
					return Permanent(errors.New("not yet"))
				case string(j.Payload) == "k1-hold":
					<-release
				}
				return rec.handle(ctx, j)
			})
	})
	first := h.enqueue(Spec{Type: "seq-replay-wait", Tenant: "k", Payload: []byte("k0-first")})
	h.waitStatus(first, "failed", 5*time.Second)
	hold := h.enqueue(Spec{Type: "seq-replay-wait", Tenant: "k", Payload: []byte("k1-hold")})
	h.waitStatus(hold, "processing", 5*time.Second)
	failFirst.Store(false)
	if _, err := h.stack.Replay(bg, h.client, first); err != nil {
		t.Fatal(err)
	}
	if v, _ := h.stack.Get(bg, first); v.Raw["status"] != "waiting" {
		t.Fatalf("the replayed job is %s behind its key's running job, want waiting", v.Raw["status"])
	}
	close(release)
	h.waitStatus(first, "done", 15*time.Second)
	rec.check(t, "k", []string{"k1-hold", "k0-first"})
	waitFairIdle(t, h, "seq-replay-wait")
}
