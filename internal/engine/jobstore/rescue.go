package jobstore

import (
	"context"
	"fmt"
	"time"
)

// RescueState is what the rescue script decided.
type RescueState string

// The rescue states.
const (
	// Rescued: the job is retrying with a new delivery (Delivery) to enqueue.
	Rescued RescueState = "rescued"
	// RescueFailed: that was its last attempt; the job is failed.
	RescueFailed RescueState = "failed"
	// Skip: the job is not processing this delivery.
	Skip RescueState = "skip"
	// Alive: its lease is held or it beat recently.
	Alive RescueState = "alive"
	// RescuedBefore: a rescue of this delivery made the job retrying with the next (Delivery),
	// which asynq may lack: that rescue's enqueue and put-back both failed (Redis went away).
	// Nothing was written; the caller enqueues Delivery unless asynq has it.
	RescuedBefore RescueState = "rescued_before"
)

// Rescue is the rescue script's answer.
type Rescue struct {
	State    RescueState
	Delivery string
	// Heartbeat is the lost run's last heartbeat.
	Heartbeat time.Time
}

// Rescue moves a job whose run (active delivery) lost its worker to retrying with a new delivery,
// or to failed when no attempt is left (clearing its until_done marker: k from the delivery's
// dedup header); leaseTTL is how old its heartbeat must be.
func (s *Store) Rescue(ctx context.Context, k Keys, active string, now time.Time, leaseTTL time.Duration) (Rescue, error) {
	state, rest, err := s.runList(ctx, rescueScript, "rescue", []string{k.Record, k.Lease, k.Timeline, k.Marker},
		active, now.UnixMilli(), ms(leaseTTL), ms(s.cfg.Retention), s.cfg.TimelineCap, s.cfg.WorkerID, bit(k.Clear == "done"))
	if err != nil {
		return Rescue{}, err
	}
	r := Rescue{State: RescueState(state)}
	switch r.State {
	case RescuedBefore:
		r.Delivery, err = stringAt("rescue", rest, 0)
		return r, err
	case Rescued:
		if r.Delivery, err = stringAt("rescue", rest, 0); err != nil {
			return Rescue{}, err
		}
		beat, err := intAt("rescue", rest, 1)
		r.Heartbeat = time.UnixMilli(beat)
		return r, err
	case RescueFailed:
		beat, err := intAt("rescue", rest, 0)
		r.Heartbeat = time.UnixMilli(beat)
		return r, err
	case Skip, Alive:
		return r, nil
	}
	return Rescue{}, replyError("rescue", append([]any{state}, rest...))
}

// Unrescue puts a rescued job back as it was (its new delivery was not enqueued), so the next
// pass rescues it again.
func (s *Store) Unrescue(ctx context.Context, k Keys, delivery, previous string) error {
	if err := unrescueScript.Run(ctx, s.rdb, []string{k.Record}, delivery, previous).Err(); err != nil {
		return fmt.Errorf("jobstore: unrescue: %w", err)
	}
	return nil
}
