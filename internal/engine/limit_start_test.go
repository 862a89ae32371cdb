package engine

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A start sent with its take while the key is full ran without a slot: it is requeued with its
// attempt given back, no handler runs past the limit, and the job runs once a slot is free.
func TestAStartWithoutASlotIsRequeued(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var running, most atomic.Int32
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "work", Limit: Limit{Concurrency: 1, Key: func(sp Spec) string { return sp.Tenant }}},
			func(ctx context.Context, j *Job) error {
				n := running.Add(1)
				defer running.Add(-1)
				if n > most.Load() {
					most.Store(n)
				}
				if string(j.Payload) == "first" {
					<-release
				}
				return nil
			})
	})
	first := h.enqueue(Spec{Type: "work", Tenant: "a", Resource: "r1", Payload: []byte("first")})
	h.waitStatus(first, "processing", 10*time.Second)
	// This process has not seen the key full: the second job's start goes with its take.
	second := h.enqueue(Spec{Type: "work", Tenant: "a", Resource: "r2", Payload: []byte("second")})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		v, err := h.stack.Get(bg, second)
		if err == nil && has(v, "requeued") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second job was not requeued: %v %v", v.Record, events(v))
		}
	}
	close(release)
	h.waitStatus(first, "done", 10*time.Second)
	v := h.waitStatus(second, "done", 20*time.Second)
	var requeue string
	for _, e := range v.Timeline {
		if e.Event == "requeued" {
			requeue = e.Detail
		}
	}
	if most.Load() != 1 || v.Raw["attempt"] != "1" || !strings.Contains(requeue, "no limit slot") {
		t.Fatalf("most running %d, attempt %s, requeue detail %q; timeline %v", most.Load(), v.Raw["attempt"], requeue, events(v))
	}
}
