package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// A replay's delivery that starts before the record has taken it (asynq keeps delays in whole
// seconds, and a stalled Redis may run the replay script late) is sent back, not acknowledged: once
// the record takes it, the job runs. Before this rule the job stayed queued without a delivery.
func TestAReplayDeliveryWaitsForItsRecord(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "x", MaxAttempts: 1}, func(ctx context.Context, j *Job) error {
			if runs.Add(1) == 1 {
				return Permanent(errors.New("first run fails"))
			}
			return nil
		})
	})
	id := h.enqueue(Spec{Type: "x", Resource: "r"})
	h.waitStatus(id, "failed", 10*time.Second)
	tc, _ := h.stack.TaskConfig("x")
	keys, err := h.stack.store.Keys(id, "")
	if err != nil {
		t.Fatal(err)
	}
	// The replay's first half: its delivery, due at once.
	if err := h.stack.deliver(bg, h.client, tc, id, DeliveryID(id, 2), "", "", nil, 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the early delivery was sent back", func() bool { return h.stack.Stats.Bounces.Load() > 0 })
	// Its second half, late.
	if _, err := h.stack.takeReplay(bg, keys, id, 2, 0, false); err != nil {
		t.Fatal(err)
	}
	v := h.waitStatus(id, "done", 10*time.Second)
	if runs.Load() != 2 || v.Raw["delivery"] != DeliveryID(id, 2) {
		t.Fatalf("runs %d, record %v", runs.Load(), v.Raw)
	}
}
