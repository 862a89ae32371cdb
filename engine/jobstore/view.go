package jobstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/locking"
)

// View is everything known about a job: its record, the live lease of its resource, its timeline.
type View struct {
	Record Record
	// Raw is the record's hash as stored, without the fence fields (forensics and tests).
	Raw      map[string]string
	Lease    locking.LeaseInfo
	Timeline []Event
}

// Load reads a job's view in one round trip.
func (s *Store) Load(ctx context.Context, id string) (View, error) {
	k, err := s.Keys(id, "")
	if err != nil {
		return View{}, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	pipe := s.rdb.Pipeline()
	rec := pipe.HGetAll(ctx, k.Record)
	tl := pipe.LRange(ctx, k.Timeline, 0, -1)
	owner := pipe.Get(ctx, k.Lease)
	ttl := pipe.PTTL(ctx, k.Lease)
	fence := pipe.Get(ctx, k.Fence)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return View{}, fmt.Errorf("jobstore: read job %s: %w", id, err)
	}
	v := View{Raw: rec.Val()}
	if len(v.Raw) == 0 {
		return View{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if _, ok := v.Raw[FieldLeaseOwner]; !ok && v.Raw[locking.FieldFenceOwner] != "" {
		// An ended record keeps its last run's owner once, in the fence (record_compact).
		v.Raw[FieldLeaseOwner] = v.Raw[locking.FieldFenceOwner]
	}
	delete(v.Raw, locking.FieldFenceOwner)
	delete(v.Raw, locking.FieldFenceToken)
	v.Record = ParseRecord(v.Raw)
	v.Lease.Owner = owner.Val()
	if d := ttl.Val(); d > 0 {
		v.Lease.Remaining = d
	}
	v.Lease.Fence, _ = fence.Int64()
	for i, raw := range tl.Val() {
		v.Timeline = append(v.Timeline, decodeEvent(raw, int64(i)))
	}
	return v, nil
}
