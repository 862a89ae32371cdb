package problem

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jobguard/jobguard/internal/engine"
)

// An answer says why in the API's words, not the engine's ("engine: job has ended: it is done").
func TestReasonLeavesOutTheEnginesWords(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err, sentinel error
		want          string
	}{
		{fmt.Errorf("%w: it is cancelled", engine.ErrEnded), engine.ErrEnded, "it is cancelled"},
		{fmt.Errorf("%w: another replay took it", engine.ErrNotFailed), engine.ErrNotFailed, "another replay took it"},
		{fmt.Errorf("wrapped: %w", fmt.Errorf("%w: it is done", engine.ErrWorkflowEnded)), engine.ErrWorkflowEnded, "it is done"},
		{engine.ErrEnded, engine.ErrEnded, "job has ended"},
		{errors.New("other"), engine.ErrEnded, "job has ended"},
	} {
		if got := Reason(c.err, c.sentinel); got != c.want {
			t.Errorf("Reason(%q) = %q, want %q", c.err, got, c.want)
		}
	}
}
