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
	derive(id, v.Raw)
	if _, ok := v.Raw[FieldLeaseOwner]; !ok && v.Raw[locking.FieldFenceOwner] != "" {
		// An ended record keeps its last run's owner once, in the fence (record_compact).
		v.Raw[FieldLeaseOwner] = v.Raw[locking.FieldFenceOwner]
	}
	delete(v.Raw, locking.FieldFenceOwner)
	delete(v.Raw, locking.FieldFenceToken)
	v.Timeline = timelineOf(id, v.Raw, tl.Val())
	delete(v.Raw, FieldTimelineFolded)
	v.Record = ParseRecord(v.Raw)
	v.Lease.Owner = owner.Val()
	if d := ttl.Val(); d > 0 {
		v.Lease.Remaining = d
	}
	v.Lease.Fence, _ = fence.Int64()
	return v, nil
}

// timelineOf is job id's whole timeline: the events its record f stands for, then the stored
// ones.
func timelineOf(id string, f map[string]string, stored []string) []Event {
	events := foldedEvents(id, f, 0)
	folded := len(events)
	for i, raw := range stored {
		events = append(events, decodeEvent(raw, int64(folded+i)))
	}
	return events
}

// ReadTimeline reads the whole timeline of the job whose record is at recordKey with any client,
// for tools and test suites that walk a keyspace (a folded one rebuilt, as Load does): one
// pipeline. A job Redis no longer has has none.
func ReadTimeline(ctx context.Context, rdb redis.Cmdable, recordKey string) ([]Event, error) {
	fields := append(append([]string(nil), foldedFields...), deriveSources...)
	pipe := rdb.Pipeline()
	rec := pipe.HMGet(ctx, recordKey, fields...)
	tl := pipe.LRange(ctx, recordKey+timelineSuffix, 0, -1)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("jobstore: read timeline of %s: %w", recordKey, err)
	}
	f := map[string]string{}
	for i, v := range rec.Val() {
		if s, ok := v.(string); ok {
			f[fields[i]] = s
		}
	}
	derive(idOfRecordKey(recordKey), f)
	return timelineOf(idOfRecordKey(recordKey), f, tl.Val()), nil
}
