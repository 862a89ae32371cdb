package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/freetext"
)

// Progress shows in the job's record, never goes backwards within a run (refused, nothing
// written), starts again in the next run, and rejects values out of range.
func TestProgressNeverGoesBackwardsWithinARun(t *testing.T) {
	t.Parallel()
	type report struct{ backwards, outOfRange, unprintable error }
	reported, release := make(chan report, 1), make(chan struct{})
	h := newHarness(t, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "steps", Backoff: Backoff{Base: time.Second, Max: time.Second}}, func(ctx context.Context, j *Job) error {
			if j.Attempt > 1 {
				return j.Progress(ctx, 5, "second run")
			}
			for _, p := range []int{10, 60} {
				if err := j.Progress(ctx, p, "step"); err != nil {
					return err
				}
			}
			reported <- report{backwards: j.Progress(ctx, 40, "back"), outOfRange: j.Progress(ctx, 101, ""), unprintable: j.Progress(ctx, 70, "\x1b]0;pwned\a")}
			<-release
			return errors.New("first run fails")
		})
	})
	id := h.enqueue(Spec{Type: "steps"})
	r := <-reported
	if !errors.Is(r.backwards, ErrProgressBackwards) || r.outOfRange == nil || !errors.Is(r.unprintable, freetext.ErrUnprintable) {
		t.Fatalf("backwards: %v, out of range: %v, a note with ESC: %v", r.backwards, r.outOfRange, r.unprintable)
	}
	v, _ := h.stack.Get(bg, id)
	if v.Record.Progress != 60 || v.Record.ProgressNote != "step" || v.Record.ProgressAt.IsZero() {
		t.Fatalf("mid-run progress %d %q", v.Record.Progress, v.Record.ProgressNote)
	}
	close(release)
	v = h.waitStatus(id, "done", 10*time.Second)
	if v.Record.Progress != 5 || v.Record.ProgressNote != "second run" {
		t.Fatalf("second run's progress %d %q", v.Record.Progress, v.Record.ProgressNote)
	}
}

// A run whose job was cancelled (the fence raised) cannot move its progress.
func TestProgressIsFenced(t *testing.T) {
	t.Parallel()
	started, late := make(chan struct{}), make(chan error, 1)
	h := newHarness(t, Config{LeaseTTL: 3 * time.Second}, func(s *Stack) {
		s.Register(TaskConfig{Type: "slow"}, func(ctx context.Context, j *Job) error {
			if err := j.Progress(ctx, 20, "early"); err != nil {
				return err
			}
			close(started)
			<-ctx.Done()
			late <- j.Progress(context.Background(), 90, "late")
			return nil
		})
	})
	id := h.enqueue(Spec{Type: "slow"})
	<-started
	h.cancelRunning(id, "late progress", late)
	v, _ := h.stack.Get(bg, id)
	if v.Record.Status != jobstore.StatusCancelled || v.Record.Progress != 20 || v.Record.ProgressNote != "early" {
		t.Fatalf("after the cancel: %s %d %q", v.Record.Status, v.Record.Progress, v.Record.ProgressNote)
	}
}
