package engine

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A job that ends done leaves the expiry index at the next sweep; a failed one stays (a replay
// makes it wait again), and so does one that still waits.
func TestEndedJobsLeaveTheExpiryIndex(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "ok"}, func(ctx context.Context, j *Job) error { return nil })
		s.Register(TaskConfig{Type: "bad", MaxAttempts: 1}, func(ctx context.Context, j *Job) error { return errors.New("boom") })
	})
	done := h.enqueue(Spec{Type: "ok", Resource: "r1"})
	failed := h.enqueue(Spec{Type: "bad", Resource: "r2"})
	waiting := h.enqueue(Spec{Type: "ok", Resource: "r3", ProcessIn: time.Hour})
	h.waitStatus(done, "done", 10*time.Second)
	h.waitStatus(failed, "failed", 10*time.Second)
	key := h.stack.store.ExpiryKey()
	for _, id := range []string{done, failed, waiting} {
		if _, err := h.rdb.ZScore(bg, key, id).Result(); err != nil {
			t.Fatalf("%s not in the expiry index before the sweep: %v", id, err)
		}
	}
	if _, err := h.stack.ExpireDue(bg); err != nil {
		t.Fatal(err)
	}
	if _, err := h.rdb.ZScore(bg, key, done).Result(); err == nil {
		t.Fatal("the done job is still in the expiry index after the sweep")
	}
	for _, id := range []string{failed, waiting} {
		if _, err := h.rdb.ZScore(bg, key, id).Result(); err != nil {
			t.Fatalf("%s left the expiry index: %v", id, err)
		}
	}
}
