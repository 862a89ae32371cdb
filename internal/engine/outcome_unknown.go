package engine

import (
	"context"
	"errors"
	"fmt"
)

// unknownOutcome is ErrOutcomeUnknown for a job whose confirmation was sent and not answered: it
// may stand or not, and which is settled once the request's deadline has passed on Redis's clock
// (a confirmation reaching Redis later finds the deadline past and writes nothing). UnknownJob
// reads it.
type unknownOutcome struct {
	res Enqueued
	err error
}

func (e *unknownOutcome) Error() string {
	return fmt.Sprintf("%v: job %s: %v", ErrOutcomeUnknown, e.res.JobID, e.err)
}

func (e *unknownOutcome) Unwrap() []error { return []error{ErrOutcomeUnknown, e.err} }

// UnknownJob is the job an Enqueue answered ErrOutcomeUnknown about because its confirmation's
// answer was lost, as Enqueue would have returned it had the confirmation been answered; false
// for any other error.
func UnknownJob(err error) (Enqueued, bool) {
	var u *unknownOutcome
	if errors.As(err, &u) {
		return u.res, true
	}
	return Enqueued{}, false
}

// JobConfirmed says whether job id's record is confirmed (its enqueue took), false when it is not
// or is gone; for an UnknownJob read once its request's deadline has passed, the answer is final.
func (s *Stack) JobConfirmed(ctx context.Context, id string) (bool, error) {
	keys, err := s.store.Keys(id, "")
	if err != nil {
		return false, fmt.Errorf("engine: %w", err)
	}
	ok, err := s.store.Confirmed(ctx, keys)
	if err != nil {
		return false, fmt.Errorf("engine: %w", err)
	}
	return ok, nil
}
