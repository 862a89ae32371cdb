package jobstore

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// NextUnstartedDelivery names the delivery that job id would get if its active delivery was
// taken by a worker that never started it: "" unless the job is queued, retrying or waiting (a
// fairly dispatched job's record stays waiting once admitted, until its start), confirmed, with
// active as its current delivery. The caller enqueues it, then RescueUnstarted adopts it.
func (s *Store) NextUnstartedDelivery(ctx context.Context, k Keys, id, active string) (string, error) {
	f, err := s.rdb.HMGet(ctx, k.Record, FieldStatus, FieldDelivery, FieldDeliveries, FieldConfirmed).Result()
	if err != nil {
		return "", fmt.Errorf("jobstore: read delivery: %w", err)
	}
	str := func(i int) string { v, _ := f[i].(string); return v }
	if st := Status(str(0)); !unstartedStatus(st) || str(1) != active || str(3) == "0" {
		return "", nil
	}
	n, _ := strconv.Atoi(str(2))
	return DeliveryID(id, n+1), nil
}

// unstartedStatus: a job in st has not started its current delivery.
func unstartedStatus(st Status) bool {
	return st == StatusQueued || st == StatusRetrying || st == StatusWaiting
}

// RescueUnstarted makes next, already enqueued, the delivery of a job whose active delivery was
// taken by a worker that never started it, leaving its status and attempt; false when the job
// started, ended or moved on since NextUnstartedDelivery (next is then sent back at its start for
// a few seconds, then acknowledged as stale).
func (s *Store) RescueUnstarted(ctx context.Context, k Keys, active, next string, now time.Time) (bool, error) {
	res, err := rescueUnstartedScript.Run(ctx, s.rdb, []string{k.Record, k.Timeline},
		active, next, now.UnixMilli(), ms(s.cfg.Retention), s.cfg.TimelineCap, s.cfg.WorkerID).Text()
	if err != nil {
		return false, fmt.Errorf("jobstore: rescue unstarted: %w", err)
	}
	switch res {
	case "rescued":
		return true, nil
	case "skip":
		return false, nil
	}
	return false, replyError("rescue_unstarted", res)
}
