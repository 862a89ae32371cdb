package jobstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The reconciler (engine.Reconciler) compares records with asynq's deliveries. The store gives it
// the open jobs of the index of all jobs, page by page (OpenJobs), which records are gone
// (Missing), and the compare-and-set that takes a lost delivery again (TakeLostDelivery).

var reconcileScript = script("reconcile.lua")

func init() { allScripts = append(allScripts, reconcileScript) }

// Open is a job that has not ended (queued, retrying or processing) and whose enqueue was
// confirmed, as the reconciler reads it.
type Open struct {
	JobID, Type, Queue string
	Status             Status
	Delivery           string
	OpKey, Dedup       string
	// UpdatedAt is the record's updated_at as stored (unix ms), for TakeLostDelivery's compare.
	UpdatedAt   string
	Updated     time.Time
	HeartbeatAt time.Time
	// LeaseHeld says the resource's lease is held by the owner the record names (a live run).
	LeaseHeld bool
	// Workflow is the record's FieldWorkflow ("" when the job is no workflow's node).
	Workflow string
}

var openFields = []string{FieldType, FieldQueue, FieldStatus, FieldDelivery, FieldOpKey, FieldDedup,
	FieldUpdatedAt, FieldHeartbeatAt, FieldLeaseOwner, FieldConfirmed, FieldWorkflow}

// OpenJobs reads up to n entries of the index of all jobs after cursor ("" the newest), newest
// first, and returns the open ones among them and the cursor of the next entries ("" when the
// index has no more). Three round trips whatever n: the ids, then the records and their leases.
func (s *Store) OpenJobs(ctx context.Context, cursor string, n int) ([]Open, string, error) {
	maxScore, after := "+inf", ""
	if cursor != "" {
		score, id, err := decodeCursor(cursor)
		if err != nil {
			return nil, "", err
		}
		maxScore, after = strconv.FormatInt(score, 10), id
	}
	var keysets [][]string
	for _, index := range s.indexKeys("") {
		keysets = append(keysets, []string{index})
	}
	entries, _, err := s.listMerged(ctx, keysets, maxScore, after, n, "-inf", TagsAny)
	if err != nil {
		return nil, "", fmt.Errorf("jobstore: open jobs: %w", err)
	}
	next := ""
	if len(entries) == n {
		last := entries[len(entries)-1]
		next = encodeCursor(last.score, last.id)
	}
	pipe := s.rdb.Pipeline()
	recs := make([]*redis.SliceCmd, 0, len(entries))
	for _, e := range entries {
		k, err := s.Keys(e.id, "")
		if err != nil {
			return nil, "", fmt.Errorf("jobstore: open jobs: %w", err)
		}
		recs = append(recs, pipe.HMGet(ctx, k.Record, openFields...))
	}
	if len(recs) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, "", fmt.Errorf("jobstore: open jobs' records: %w", err)
		}
	}
	var open []Open
	owners := map[int]string{}
	for i, c := range recs {
		v := c.Val()
		str := func(j int) string { s, _ := v[j].(string); return s }
		if len(v) != len(openFields) {
			continue
		}
		st := Status(str(2))
		if (st != StatusQueued && st != StatusRetrying && st != StatusProcessing) || str(9) == "0" {
			continue // ended, gone, or a claim whose enqueue is not confirmed
		}
		if owner := str(8); owner != "" && st == StatusProcessing {
			owners[len(open)] = owner
		}
		open = append(open, Open{JobID: entries[i].id, Type: str(0), Queue: str(1), Status: st, Delivery: str(3),
			OpKey: str(4), Dedup: str(5), UpdatedAt: str(6), Updated: stamp(str(6)), HeartbeatAt: stamp(str(7)), Workflow: str(10)})
	}
	if len(owners) > 0 {
		pipe := s.rdb.Pipeline()
		holders := map[int]*redis.StringCmd{}
		for i := range owners {
			k, _ := s.Keys(open[i].JobID, "")
			holders[i] = pipe.Get(ctx, k.Lease)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, "", fmt.Errorf("jobstore: open jobs' leases: %w", err)
		}
		for i, h := range holders {
			open[i].LeaseHeld = h.Val() == owners[i]
		}
	}
	return open, next, nil
}

// Missing reports, for each job id, whether its record is gone (one pipeline).
func (s *Store) Missing(ctx context.Context, ids []string) ([]bool, error) {
	out := make([]bool, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(ids))
	for i, id := range ids {
		k, err := s.Keys(id, "")
		if err != nil {
			return nil, err
		}
		cmds[i] = pipe.Exists(ctx, k.Record)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("jobstore: records exist: %w", err)
	}
	for i, c := range cmds {
		out[i] = c.Val() == 0
	}
	return out, nil
}

// RetakeState is what TakeLostDelivery found.
type RetakeState string

// The retake states.
const (
	// Retaken: the record is as read; the caller enqueues (or runs) the delivery now.
	Retaken RetakeState = "ok"
	// RetakeGone: no record.
	RetakeGone RetakeState = "gone"
	// RetakeMoved: the record changed since it was read; nothing written.
	RetakeMoved RetakeState = "moved"
)

// TakeLostDelivery makes an open job whose delivery asynq lost (or archived) take it again, if
// its record is still as o was read (scripts/reconcile.lua); detail goes on the timeline.
func (s *Store) TakeLostDelivery(ctx context.Context, o Open, now time.Time, detail string) (RetakeState, error) {
	k, err := s.Keys(o.JobID, "")
	if err != nil {
		return "", err
	}
	res, err := reconcileScript.Run(ctx, s.rdb, []string{k.Record, k.Timeline}, o.Delivery, o.UpdatedAt,
		now.UnixMilli(), ms(s.cfg.Retention), s.cfg.TimelineCap, s.cfg.WorkerID, detail).Result()
	if err != nil {
		return "", fmt.Errorf("jobstore: reconcile: %w", err)
	}
	switch st, _ := res.(string); RetakeState(st) {
	case Retaken, RetakeGone, RetakeMoved:
		return RetakeState(st), nil
	}
	return "", replyError("reconcile", res)
}
