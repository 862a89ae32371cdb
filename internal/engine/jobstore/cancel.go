package jobstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// CancelInfo is what a cancel needs to know before its script runs: the dedup marker to release
// and the queue of the delivery to delete. Neither changes during a job's life.
type CancelInfo struct {
	Type, Queue, Tenant, Dedup, Resource string
	// Workflow is the record's FieldWorkflow: "<workflow id>:<node id>" for a workflow's node.
	Workflow string
	// FairKey is the record's FieldFairKey (a job created waiting for its key's admission).
	FairKey string
}

// CancelInfo reads the fields a cancel needs, in one round trip; ErrNotFound when no record.
func (s *Store) CancelInfo(ctx context.Context, k Keys) (CancelInfo, error) {
	v, err := s.rdb.HMGet(ctx, k.Record, FieldType, FieldQueue, FieldTenant, FieldDedup, FieldResource, FieldWorkflow,
		FieldFairKey).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return CancelInfo{}, fmt.Errorf("jobstore: read job: %w", err)
	}
	str := func(i int) string { s, _ := v[i].(string); return s }
	info := CancelInfo{Type: str(0), Queue: str(1), Tenant: str(2), Dedup: str(3), Resource: str(4), Workflow: str(5),
		FairKey: str(6)}
	if info.Type == "" {
		return CancelInfo{}, ErrNotFound
	}
	return info, nil
}

// CancelArgs are one cancel's.
type CancelArgs struct {
	Now time.Time
	// By and Why go on the timeline (who cancelled, and the reason given; Why becomes last_error).
	By, Why string
}

// CancelState is what the cancel script found.
type CancelState string

// The cancel states.
const (
	// Cancelled: the job is cancelled now (it was From, its delivery Delivery).
	Cancelled CancelState = "cancelled"
	// CancelGone: no record.
	CancelGone CancelState = "gone"
	// Ended: the job had ended already (From); nothing written.
	Ended CancelState = "ended"
)

// Cancelling is the cancel script's answer.
type Cancelling struct {
	State CancelState
	// From is the status the job had.
	From Status
	// Delivery is the job's current delivery (asynq task id), to delete from its queue.
	Delivery string
	// Token is the fence the cancel raised (From processing), 0 otherwise.
	Token int64
}

// Cancel ends a job that has not ended, in one round trip (scripts/cancel.lua): status cancelled,
// dedup marker released; a running job's fence raised above its run's token and its lease deleted.
// k must carry the job's marker (WithMarker) when it has one.
func (s *Store) Cancel(ctx context.Context, k Keys, a CancelArgs) (Cancelling, error) {
	state, rest, err := s.runList(ctx, cancelScript, "cancel", []string{k.Record, k.Lease, k.Fence, k.Timeline, k.Marker},
		a.Now.UnixMilli(), ms(s.cfg.Retention), s.cfg.TimelineCap, a.By, a.Why, s.cfg.WorkerID)
	if err != nil {
		return Cancelling{}, err
	}
	c := Cancelling{State: CancelState(state)}
	switch c.State {
	case CancelGone:
		return c, nil
	case Ended:
		from, err := stringAt("cancel", rest, 0)
		c.From = Status(from)
		return c, err
	case Cancelled:
		from, err := stringAt("cancel", rest, 0)
		if err != nil {
			return Cancelling{}, err
		}
		if c.Delivery, err = stringAt("cancel", rest, 1); err != nil {
			return Cancelling{}, err
		}
		c.From = Status(from)
		c.Token, err = intAt("cancel", rest, 2)
		return c, err
	}
	return Cancelling{}, replyError("cancel", append([]any{state}, rest...))
}

// CancelledUnder says whether job k was cancelled while the run of lease owner held it: its
// status is cancelled and the record still names that run's owner (a cancel leaves it).
func (s *Store) CancelledUnder(ctx context.Context, k Keys, owner string) (bool, error) {
	v, err := s.rdb.HMGet(ctx, k.Record, FieldStatus, FieldLeaseOwner, FieldCancelledRun).Result()
	if err != nil {
		return false, fmt.Errorf("jobstore: read job status: %w", err)
	}
	status, _ := v[0].(string)
	holder, _ := v[1].(string)
	cancelled, _ := v[2].(string)
	return Status(status) == StatusCancelled && holder == owner && cancelled != "", nil
}

// Status reads a job's status alone; "" when there is no record.
func (s *Store) Status(ctx context.Context, k Keys) (Status, error) {
	st, err := s.rdb.HGet(ctx, k.Record, FieldStatus).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", fmt.Errorf("jobstore: read job status: %w", err)
	}
	return Status(st), nil
}
