package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/redistest"
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

// A delivery sent back here that then ran in another process is never seen here again: its entry
// goes at the next new one once it is older than untakenForget, so the map does not grow for good.
func TestUntakenEntriesAreForgotten(t *testing.T) {
	t.Parallel()
	s := New(redistest.NewDB(t).Client, Config{})
	defer s.Close()
	s.untaken.Store("old.d2", time.Now().Add(-untakenForget-time.Second))
	s.untaken.Store("recent.d2", time.Now())
	if d := s.untakenFor("new.d2"); d > time.Second {
		t.Fatalf("a new delivery seen for %v", d)
	}
	_, old := s.untaken.Load("old.d2")
	_, recent := s.untaken.Load("recent.d2")
	if old || !recent {
		t.Fatalf("old kept %v, recent kept %v; want false, true", old, recent)
	}
}
