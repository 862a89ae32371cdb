package schedule

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// A schedule of a fairly dispatched sequence type goes through the admission layer: while a
// tick's job runs, the next tick's job (Overlap allow) waits for its key instead of running
// beside it, and runs once the first ended.
func TestScheduledJobsOfASequenceWaitForTheirKey(t *testing.T) {
	t.Parallel()
	b := newBundle(t, Config{}, Spec{Name: "seq", Cron: "@every 1s", Type: typ, Overlap: Allow})
	release := make(chan struct{})
	var runs, running, overlaps atomic.Int32
	in := b.start("w", func(s *engine.Stack) {
		s.Register(engine.TaskConfig{Type: typ, Fair: &engine.Fair{Sequence: true, Capacity: 2}},
			func(ctx context.Context, j *engine.Job) error {
				if running.Add(1) > 1 {
					overlaps.Add(1)
				}
				defer running.Add(-1)
				if runs.Add(1) == 1 {
					select {
					case <-release:
					case <-ctx.Done():
					}
				}
				return nil
			})
	})
	defer in.serve(t).Shutdown()
	testsupport.Eventually(t, 4*time.Second, "the first job running", func() bool { return runs.Load() == 1 })
	testsupport.Eventually(t, 5*time.Second, "a second tick's job", func() bool { return len(b.jobs("seq")) >= 2 })
	second := TickJobID("seq", "", b.jobs("seq")[1])
	v, err := in.stack.Get(context.Background(), second)
	if err != nil || v.Raw["status"] != "waiting" {
		t.Fatalf("the second tick's job is %q (%v) while the first runs, want waiting", v.Raw["status"], err)
	}
	close(release)
	testsupport.Eventually(t, 5*time.Second, "the second tick's job run", func() bool { return runs.Load() >= 2 })
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d runs overlapped another of the sequence", n)
	}
}
