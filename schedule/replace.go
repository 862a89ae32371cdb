package schedule

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobguard/jobguard/internal/engine"
)

// replace cancels the previous tick's job for overlap replace: a running handler's context is
// cancelled with engine.ErrCancelled at its keeper's next renewal, a waiting delivery is deleted.
// A job that ended or expired in between needs nothing.
func (s *Scheduler) replace(ctx context.Context, p *plan, id string, tick time.Time) error {
	_, err := s.stack.Cancel(ctx, id, engine.CancelRequest{
		By: "schedule:" + p.Name, Why: "replaced by the tick of " + tick.UTC().Format(time.RFC3339),
	})
	switch {
	case err == nil:
		s.count(p.Name, OutcomeReplaced, 1)
		return nil
	case errors.Is(err, engine.ErrEnded), errors.Is(err, engine.ErrJobNotFound):
		return nil
	}
	return fmt.Errorf("schedule %q: replace job %s: %w", p.Name, id, err)
}
