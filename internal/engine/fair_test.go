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

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// A job waiting for its key's turn says so (status waiting, a waiting event); cancelled while it
// waits, it never starts, and its place goes to the next job.
func TestFairWaitingJobIsVisibleAndCancellable(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var mu sync.Mutex
	var ran []string
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "fair-work", Fair: &Fair{Capacity: 1}}, func(ctx context.Context, j *Job) error {
			mu.Lock()
			ran = append(ran, string(j.Payload))
			mu.Unlock()
			if string(j.Payload) == "first" {
				<-release
			}
			return nil
		})
	})
	first := h.enqueue(Spec{Type: "fair-work", Tenant: "a", Payload: []byte("first")})
	h.waitStatus(first, "processing", 5*time.Second)
	second := h.enqueue(Spec{Type: "fair-work", Tenant: "a", Payload: []byte("second")})
	third := h.enqueue(Spec{Type: "fair-work", Tenant: "b", Payload: []byte("third")})
	v := h.waitStatus(second, "waiting", time.Second)
	if !has(v, "waiting") {
		t.Fatalf("a waiting job's timeline %v has no waiting event", events(v))
	}
	if _, err := h.stack.Cancel(bg, second, CancelRequest{By: "test", Why: "not needed"}); err != nil {
		t.Fatal(err)
	}
	close(release)
	h.waitStatus(first, "done", 5*time.Second)
	h.waitStatus(third, "done", 5*time.Second)
	h.waitStatus(second, "cancelled", time.Second)
	mu.Lock()
	ranSecond := slices.Contains(ran, "second")
	mu.Unlock()
	if ranSecond {
		t.Fatal("the cancelled waiting job ran")
	}
	waitFairIdle(t, h, "fair-work")
}

// waitFairIdle polls until typ's admission layer holds nothing: a job's end frees its admission
// just after its done status is written.
func waitFairIdle(t *testing.T, h *harness, typ string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := h.stack.FairCounts(bg, typ, 10)
		if err == nil && c.Admitted == 0 && c.WaitingKeys == 0 && c.RunningKeys == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("admission left behind: %+v %v", c, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A sequence runs its key's jobs one at a time in enqueue order, across a retry; keys do not
// wait for each other.
func TestFairSequenceRunsInOrderAcrossRetries(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	order := map[string][]string{}
	running := map[string]int{}
	overlaps := 0
	failedOnce := map[string]bool{}
	h := newHarness(t, Config{Concurrency: 4}, func(s *Stack) {
		s.Register(TaskConfig{Type: "seq", MaxAttempts: 3, Backoff: Backoff{Base: time.Millisecond, Max: time.Millisecond},
			Fair: &Fair{Sequence: true, Capacity: 4}}, func(ctx context.Context, j *Job) error {
			key, step := string(j.Payload[:1]), string(j.Payload)
			mu.Lock()
			running[key]++
			if running[key] > 1 {
				overlaps++
			}
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
			mu.Lock()
			defer mu.Unlock()
			running[key]--
			if step[1:] == "1" && !failedOnce[step] {
				failedOnce[step] = true
				return errors.New("transient: first attempt of step 1 fails")
			}
			order[key] = append(order[key], step)
			return nil
		})
	})
	var last []string
	for i := range 4 {
		for _, key := range []string{"x", "y", "z"} {
			last = append(last, h.enqueue(Spec{Type: "seq", Tenant: key, Payload: fmt.Appendf(nil, "%s%d", key, i)}))
		}
	}
	for _, id := range last {
		h.waitStatus(id, "done", 30*time.Second)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, key := range []string{"x", "y", "z"} {
		want := []string{key + "0", key + "1", key + "2", key + "3"}
		if !slices.Equal(order[key], want) {
			t.Errorf("key %s ran %v, want %v", key, order[key], want)
		}
	}
	if overlaps != 0 {
		t.Errorf("%d runs overlapped another of their key", overlaps)
	}
}

// A sequence that blocks on failure keeps its key's next job waiting until an operator skips the
// failed job; other keys go on meanwhile.
func TestFairSequenceBlocksUntilSkipped(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "seq-block", MaxAttempts: 1, Fair: &Fair{Sequence: true, BlockOnFailure: true, Capacity: 4}},
			func(ctx context.Context, j *Job) error {
				if string(j.Payload) == "bad" {
					return Permanent(errors.New("cannot"))
				}
				return nil
			})
	})
	bad := h.enqueue(Spec{Type: "seq-block", Tenant: "k", Payload: []byte("bad")})
	next := h.enqueue(Spec{Type: "seq-block", Tenant: "k", Payload: []byte("next")})
	other := h.enqueue(Spec{Type: "seq-block", Tenant: "other", Payload: []byte("ok")})
	v := h.waitStatus(bad, "failed", 5*time.Second)
	h.waitStatus(other, "done", 5*time.Second)
	if !has(v, "sequence_blocked") {
		// The event follows the failure in the same delivery: poll briefly.
		time.Sleep(100 * time.Millisecond)
		if v, _ = h.stack.Get(bg, bad); !has(v, "sequence_blocked") {
			t.Fatalf("the failed job's timeline %v does not say it blocks its sequence", events(v))
		}
	}
	if _, err := h.stack.SweepFair(bg); err != nil { // the sweep must not unblock it either
		t.Fatal(err)
	}
	if v, _ := h.stack.Get(bg, next); v.Raw["status"] != "waiting" {
		t.Fatalf("the blocked key's next job is %s, want waiting", v.Raw["status"])
	}
	if err := h.stack.SkipBlocked(bg, next); !errors.Is(err, ErrNotBlocked) {
		t.Fatalf("skipping a job that blocks nothing: %v, want ErrNotBlocked", err)
	}
	if err := h.stack.SkipBlocked(bg, bad); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(next, "done", 5*time.Second)
}

// A job that blocks its sequence holds its key, not a place of the type's capacity: with a
// capacity of 1, another key's job runs while the blocked key waits for its skip.
func TestABlockedSequenceGivesItsCapacityBack(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "seq-block-cap", MaxAttempts: 1, Fair: &Fair{Sequence: true, BlockOnFailure: true, Capacity: 1}},
			func(ctx context.Context, j *Job) error {
				if string(j.Payload) == "bad" {
					return Permanent(errors.New("cannot"))
				}
				return nil
			})
	})
	bad := h.enqueue(Spec{Type: "seq-block-cap", Tenant: "k", Payload: []byte("bad")})
	h.waitStatus(bad, "failed", 5*time.Second)
	next := h.enqueue(Spec{Type: "seq-block-cap", Tenant: "k", Payload: []byte("next")})
	other := h.enqueue(Spec{Type: "seq-block-cap", Tenant: "other", Payload: []byte("ok")})
	h.waitStatus(other, "done", 10*time.Second)
	if v, _ := h.stack.Get(bg, next); v.Raw["status"] != "waiting" {
		t.Fatalf("the blocked key's next job is %s, want waiting", v.Raw["status"])
	}
	if err := h.stack.SkipBlocked(bg, bad); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(next, "done", 5*time.Second)
	waitFairIdle(t, h, "seq-block-cap")
}

// The sweep releases an admitted job whose dispatcher died before releasing it, and frees the
// admission of one that ended without freeing it.
func TestFairSweepRepairsAdmissions(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "fair-sweep", Fair: &Fair{Capacity: 2}}, func(ctx context.Context, j *Job) error { return nil })
	})
	// A dispatcher that died after its admission: the job is admitted, its record still waiting.
	id := h.enqueue(Spec{Type: "fair-sweep", Tenant: "a"})
	h.waitStatus(id, "done", 5*time.Second)
	tc, _ := h.stack.TaskConfig("fair-sweep")
	// Its end frees its admission just after the done status, off the handler's goroutine: the
	// sweep below must find only the two planted admissions (it counted this one too in a CI run).
	waitFairIdle(t, h, tc.Type)
	stuck := NewJobID("r", time.Now())
	keys, _ := h.stack.store.Keys(stuck, "")
	h.rdb.HSet(bg, keys.Record, "job_id", stuck, "type", "fair-sweep", "status", "waiting", "delivery", DeliveryID(stuck, 1),
		"deliveries", 1, "attempt", 0, "max_attempts", 3, "confirmed", 1, "resource", "r")
	h.rdb.HSet(bg, h.stack.store.FairKeys(jobstore.FairShard{Type: "fair-sweep"}).Admitted, stuck, "a", "ended-elsewhere", "a")
	h.rdb.ZIncrBy(bg, h.stack.store.FairKeys(jobstore.FairShard{Type: "fair-sweep"}).Running, 2, "a")
	n, err := h.stack.SweepFair(bg)
	if err != nil || n != 2 {
		t.Fatalf("sweep repaired %d (%v), want 2", n, err)
	}
	h.waitStatus(stuck, "done", 5*time.Second)
	waitFairIdle(t, h, tc.Type)
}

// A replay of the job that blocks its sequence runs in its place: done, it lets the key go on.
func TestFairReplayOfBlockingJobUnblocks(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	fail.Store(true)
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "seq-replay", MaxAttempts: 1, Fair: &Fair{Sequence: true, BlockOnFailure: true, Capacity: 4}},
			func(ctx context.Context, j *Job) error {
				if string(j.Payload) == "first" && fail.Load() {
					return Permanent(errors.New("not yet"))
				}
				return nil
			})
	})
	first := h.enqueue(Spec{Type: "seq-replay", Tenant: "k", Payload: []byte("first")})
	next := h.enqueue(Spec{Type: "seq-replay", Tenant: "k", Payload: []byte("next")})
	h.waitStatus(first, "failed", 5*time.Second)
	if v, _ := h.stack.Get(bg, next); v.Raw["status"] != "waiting" {
		t.Fatalf("the blocked key's next job is %s, want waiting", v.Raw["status"])
	}
	fail.Store(false)
	if _, err := h.stack.Replay(bg, h.client, first); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(first, "done", 5*time.Second)
	h.waitStatus(next, "done", 5*time.Second)
}

// A fair type's Limit.Concurrency is held in the admission layer: a key never runs more than its
// limit, another key takes the free handlers meanwhile, and nothing bounces.
func TestFairLimitWithoutBounces(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	running, peak := map[string]int{}, map[string]int{}
	h := newHarness(t, Config{Concurrency: 6}, func(s *Stack) {
		s.Register(TaskConfig{Type: "fair-limit", Limit: Limit{Concurrency: 2, Key: func(s Spec) string { return s.Tenant }},
			Fair: &Fair{Capacity: 6}}, func(ctx context.Context, j *Job) error {
			key := string(j.Payload)
			mu.Lock()
			running[key]++
			peak[key] = max(peak[key], running[key])
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			mu.Lock()
			running[key]--
			mu.Unlock()
			return nil
		})
	})
	var last []string
	for i := range 20 {
		for _, key := range []string{"a", "b"} {
			id := h.enqueue(Spec{Type: "fair-limit", Tenant: key, Payload: []byte(key)})
			if i == 19 {
				last = append(last, id)
			}
		}
	}
	for _, id := range last {
		h.waitStatus(id, "done", 20*time.Second)
	}
	mu.Lock()
	defer mu.Unlock()
	if peak["a"] > 2 || peak["b"] > 2 || peak["a"] < 2 {
		t.Errorf("peak running per key %v, want 2 (the limit, reached)", peak)
	}
	if n := h.stack.Stats.Bounces.Load(); n != 0 {
		t.Errorf("%d bounces, want none", n)
	}
}
