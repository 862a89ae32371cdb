package engine

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A job that waits longer than the retention (here scheduled past it) does not vanish with its
// record: the rescuer's pass expires it visibly first (status expired, event expired with reason
// retention), and its record is kept another retention from then.
func TestAJobWaitingPastTheRetentionExpiresVisibly(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	h := newHarness(t, Config{Retention: 4 * time.Second}, func(s *Stack) {
		s.Register(TaskConfig{Type: "x"}, func(ctx context.Context, j *Job) error { runs.Add(1); return nil })
	})
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	go h.stack.NewRescuer(h.insp, h.client, 100*time.Millisecond).Run(ctx)
	id := h.enqueue(Spec{Type: "x", ProcessIn: time.Minute})
	deadline := time.Now().Add(12 * time.Second)
	for {
		v, err := h.stack.Get(bg, id)
		if errors.Is(err, ErrJobNotFound) {
			t.Fatalf("job %s vanished while it waited (its record ran out of the retention)", id)
		}
		if err == nil && v.Raw["status"] == "expired" {
			last := v.Timeline[len(v.Timeline)-1]
			if last.Event != "expired" || !strings.HasPrefix(last.Detail, "retention: ") || runs.Load() != 0 {
				t.Fatalf("expired job: last event %+v, %d runs", last, runs.Load())
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s not expired within 12s: %v %+v", id, err, v.Record)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
