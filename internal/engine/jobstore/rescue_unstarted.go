package jobstore

import (
	"context"
	"fmt"
	"time"
)

// RescueUnstarted gives a job whose active delivery was taken by a worker that never started it
// (queued or retrying, that delivery still current) a new delivery, leaving its status and
// attempt: Rescued with the delivery to enqueue, or Skip when the job started, ended or moved on.
func (s *Store) RescueUnstarted(ctx context.Context, k Keys, active string, now time.Time) (Rescue, error) {
	res, err := rescueUnstartedScript.Run(ctx, s.rdb, []string{k.Record, k.Timeline},
		active, now.UnixMilli(), ms(s.cfg.Retention), s.cfg.TimelineCap, s.cfg.WorkerID).Result()
	if err != nil {
		return Rescue{}, fmt.Errorf("jobstore: rescue unstarted: %w", err)
	}
	state, rest, err := replyList("rescue_unstarted", res)
	if err != nil {
		return Rescue{}, err
	}
	switch r := (Rescue{State: RescueState(state)}); r.State {
	case Rescued:
		r.Delivery, err = stringAt("rescue_unstarted", rest, 0)
		return r, err
	case Skip:
		return r, nil
	}
	return Rescue{}, replyError("rescue_unstarted", res)
}
