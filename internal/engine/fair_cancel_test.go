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
