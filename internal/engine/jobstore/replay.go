package jobstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotFound: no record for the id (never created, or expired after its retention).
var ErrNotFound = errors.New("jobstore: job not found")

// ReplayInfo is what a replay needs to know before it enqueues the new delivery.
type ReplayInfo struct {
	Type, OpKey, Dedup string
	Status             Status
	Deliveries         int
	// Tenant, Resource and Payload are the job's, for the limit key of its new delivery.
	Tenant, Resource string
	Payload          []byte
	// Queue is the asynq queue the record names (its shard, when its queue is sharded).
	Queue string
}

// ReplayInfo reads the fields a replay needs, in one round trip.
func (s *Store) ReplayInfo(ctx context.Context, k Keys) (ReplayInfo, error) {
	v, err := s.rdb.HMGet(ctx, k.Record, FieldType, FieldOpKey, FieldDedup, FieldStatus, FieldDeliveries,
		FieldTenant, FieldResource, FieldPayload, FieldQueue).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return ReplayInfo{}, fmt.Errorf("jobstore: read job: %w", err)
	}
	str := func(i int) string { s, _ := v[i].(string); return s }
	info := ReplayInfo{Type: str(0), OpKey: str(1), Dedup: str(2), Status: Status(str(3)), Deliveries: atoi(str(4)),
		Tenant: str(5), Resource: str(6), Payload: []byte(str(7)), Queue: str(8)}
	if info.Type == "" {
		return ReplayInfo{}, ErrNotFound
	}
	return info, nil
}

// ReplayState is what taking a replay's delivery found.
type ReplayState string

// The replay states.
const (
	Replayed ReplayState = "ok"
	// ReplayGone: no record.
	ReplayGone ReplayState = "gone"
	// ReplayConflict: the job is not failed (Status).
	ReplayConflict ReplayState = "conflict"
	// Unrunnable: the record lacks its payload.
	Unrunnable ReplayState = "unrunnable"
	// Moved: a delivery numbered n or later exists already.
	Moved ReplayState = "moved"
	// ReplayExpired: past the deadline; nothing written.
	ReplayExpired ReplayState = "expired"
)

// TakeReplay makes a failed job take delivery n, already enqueued, with its attempts reset, if
// Redis runs it by deadline (unix ms in Redis's clock; 0 none).
func (s *Store) TakeReplay(ctx context.Context, k Keys, n int, deadline int64, now time.Time, waiting bool) (ReplayState, Status, error) {
	status := StatusQueued
	if waiting {
		status = StatusWaiting
	}
	res, err := replayScript.Run(ctx, s.rdb, []string{k.Record, k.Timeline},
		deadline, now.UnixMilli(), ms(s.cfg.Retention), s.cfg.TimelineCap, n, string(status)).Result()
	if err != nil {
		return "", "", fmt.Errorf("jobstore: replay: %w", err)
	}
	r, err := replyStrings("replay", res, 1)
	if err != nil {
		return "", "", err
	}
	switch st := ReplayState(r[0]); st {
	case Replayed, ReplayGone, Unrunnable, Moved, ReplayExpired:
		return st, "", nil
	case ReplayConflict:
		if len(r) < 2 {
			return "", "", replyError("replay", res)
		}
		return st, Status(r[1]), nil
	}
	return "", "", replyError("replay", res)
}
