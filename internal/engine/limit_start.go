package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// A concurrency limit's take and the start script live in different slots (the key's and the
// job's), so they cannot be one script. Sent one after the other they cost a round trip more
// than an unlimited start; sent together in one pipeline they cost none, but both run whatever
// the other finds. A start that ran while its take found the key full is then undone: the finish
// requeues the job and gives its attempt back, as a lost slot does, and the delivery bounces.
// That costs a round trip and two timeline events, so a process sends them together only while
// it has not seen the key full for fullMemory; a key at its limit (a flooding tenant) takes first.
// Rate limits always take first: a start the rate reserves for later must wait before the start.

// fullMemory is how long a key seen full is taken before its starts.
const fullMemory = time.Second

// sawFull notes that a take found lk's key full.
func (l *limiter) sawFull(lk jobstore.LimitKeys) { l.full.Saw(lk.Holders) }

// speculate reports whether a start of lk's key may be sent with its take.
func (l *limiter) speculate(tc TaskConfig, lk jobstore.LimitKeys) bool {
	return tc.Limit.Rate == 0 && !l.full.Seen(lk.Holders)
}

// limitAndStart takes the delivery's limit slot (nil when it has none) and runs the start
// script: together when speculate allows, else one after the other. A non-nil error is what to
// answer asynq (a bounce); the caller releases the slot of a delivery that does not run.
func (s *Stack) limitAndStart(ctx context.Context, t *asynq.Task, keys jobstore.Keys, tc TaskConfig, delivery, owner string, log zerolog.Logger) (*slot, jobstore.Started, time.Time, error) {
	hasOpKey := t.Headers()[HeaderOpKey] != ""
	lk, args, limited := s.limitTake(tc, t.Headers(), owner)
	if limited && s.limits.speculate(tc, lk) {
		return s.takeAndStart(ctx, t, keys, tc, lk, args, delivery, hasOpKey, log)
	}
	var sl *slot
	if limited {
		var err error
		if sl, err = s.takeLimit(ctx, keys, tc, lk, args, delivery, log); err != nil {
			return nil, jobstore.Started{}, time.Time{}, err
		}
	}
	st, sent, err := s.start(ctx, keys, delivery, owner, tc, hasOpKey)
	if isNotDurable(err) {
		return sl, st, sent, s.startNotDurable(ctx, t, keys, tc, st, delivery, owner, sent, err, log)
	}
	if err != nil {
		// Unknown whether it ran: the lease (if taken) lapses within its TTL; try again soon.
		return sl, st, sent, s.bounce(tc.Type, "start_failed", 0, fmt.Errorf("start script: %w", err))
	}
	return sl, st, sent, nil
}

// takeAndStart sends the take and the start in one pipeline, and undoes a start that ran
// without a slot.
func (s *Stack) takeAndStart(ctx context.Context, t *asynq.Task, keys jobstore.Keys, tc TaskConfig, lk jobstore.LimitKeys, args jobstore.LimitArgs, delivery string, hasOpKey bool, log zerolog.Logger) (*slot, jobstore.Started, time.Time, error) {
	sent, takeSent := s.locks.Now(), time.Now()
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	wctx, span := scriptSpan(wctx, "jobguard.start")
	r := s.store.TakeAndStart(wctx, lk, args, keys, jobstore.StartArgs{
		Delivery: delivery, Owner: args.Owner, LeaseTTL: tc.LeaseTTL, Now: s.now(), HasOpKey: hasOpKey,
	})
	endSpan(span, r.StartErr)
	cancel()
	var sl *slot
	var over error
	if r.TakeErr != nil {
		over = s.bounce(tc.Type, "start_failed", 0, r.TakeErr)
	} else {
		sl, over = s.taken(ctx, keys, tc, lk, args, r.Take, delivery, takeSent, log)
	}
	if isNotDurable(r.StartErr) {
		return sl, r.Started, sent, s.startNotDurable(ctx, t, keys, tc, r.Started, delivery, args.Owner, sent, r.StartErr, log)
	}
	if r.StartErr != nil {
		return sl, r.Started, sent, s.bounce(tc.Type, "start_failed", 0, fmt.Errorf("start script: %w", r.StartErr))
	}
	st := r.Started
	if over == nil && st.State == jobstore.Unconfirmed {
		// As the start alone does: ask again a few times before bouncing.
		var err error
		st, sent, err = s.start(ctx, keys, delivery, args.Owner, tc, hasOpKey)
		if isNotDurable(err) {
			return sl, st, sent, s.startNotDurable(ctx, t, keys, tc, st, delivery, args.Owner, sent, err, log)
		}
		if err != nil {
			return sl, st, sent, s.bounce(tc.Type, "start_failed", 0, fmt.Errorf("start script: %w", err))
		}
	}
	if over != nil && st.State == jobstore.Run {
		s.undoStart(ctx, t, keys, tc, st, delivery, args.Owner, sent, over, log)
		return nil, st, sent, over
	}
	if over != nil && st.State != jobstore.Run {
		// The start did not run either: its answer (stale, busy, ended...) is asynq's.
		return nil, st, sent, nil
	}
	return sl, st, sent, nil
}

// undoStart requeues a job whose start ran while its take found no slot, giving the attempt back.
func (s *Stack) undoStart(ctx context.Context, t *asynq.Task, keys jobstore.Keys, tc TaskConfig, st jobstore.Started, delivery, owner string, sent time.Time, why error, log zerolog.Logger) {
	job := s.newJob(st, t, keys, tc, delivery, owner, sent)
	msg := "no limit slot: " + why.Error()
	_ = s.finish(ctx, job, jobstore.Outcome{Status: jobstore.StatusQueued, Event: "requeued", Detail: msg, Error: msg, Refund: true}, log)
	log.Info().Str("event", "requeued").Str("reason", "limit_full").Msg("started without a limit slot; requeued")
}
