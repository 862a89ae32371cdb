package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
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
