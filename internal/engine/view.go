package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// ErrJobNotFound: no record for the id (never created, or expired after its retention).
var ErrJobNotFound = errors.New("engine: job not found")

// Get reads a job's view (record, live lease, timeline) in one round trip.
func (s *Stack) Get(ctx context.Context, id string) (View, error) {
	v, err := s.store.Load(ctx, id)
	if errors.Is(err, jobstore.ErrNotFound) {
		return View{}, fmt.Errorf("%w: %s", ErrJobNotFound, id)
	}
	if err != nil {
		return View{}, fmt.Errorf("engine: %w", err)
	}
	return v, nil
}

// ReadTimeline reads the whole timeline of the job whose record is at recordKey with any client
// (jobstore.ReadTimeline): for tools and test suites that walk a keyspace instead of a Stack.
func ReadTimeline(ctx context.Context, rdb redis.Cmdable, recordKey string) ([]Event, error) {
	return jobstore.ReadTimeline(ctx, rdb, recordKey)
}
