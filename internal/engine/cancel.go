package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/freetext"
	"github.com/jobguard/jobguard/internal/redact"
	"github.com/jobguard/jobguard/locking"
)

// Cancel errors.
var (
	// ErrCancelled is the cause of a running handler's context when its job was cancelled.
	ErrCancelled = errors.New("engine: job cancelled")
	// ErrEnded: the job had ended (done, failed, revoked or cancelled) before the cancel.
	ErrEnded = errors.New("engine: job has ended")
)

// CancelRequest says who cancels and why; both go on the timeline, Why also into last_error.
type CancelRequest struct {
	By, Why string
}

// Cancelled is what a cancel did.
type Cancelled struct {
	// From is the status the job had: queued, retrying or processing.
	From jobstore.Status
	// Delivery is the job's delivery at the cancel; DeliveryDeleted says asynq no longer has it
	// (otherwise it is acknowledged without running when it is delivered).
	Delivery        string
	DeliveryDeleted bool
	// Fence is the token the cancel raised on a running job (0 when it was not running).
	Fence int64
}

// cancelStatusTimeout bounds the status read that tells a cancel from another lost lease.
const cancelStatusTimeout = 2 * time.Second

// Cancel ends a job that has not ended. In one script (jobstore.Store.Cancel) its status becomes
// cancelled and its dedup marker is released; a running job's fence is raised above its run's
// token (the run's finish and fenced writes to the record are refused from then on) and its lease
// deleted, so its handler's context is cancelled with ErrCancelled at the keeper's next renewal.
// The pending delivery of a job that was not running is then deleted from asynq where asynq
// allows; one that cannot be (already active, or moved meanwhile) is acknowledged without running
// when it is delivered, since the start script refuses a cancelled job. ErrEnded when it had ended.
func (s *Stack) Cancel(ctx context.Context, id string, req CancelRequest) (Cancelled, error) {
	keys, err := s.store.Keys(id, "")
	if err != nil {
		return Cancelled{}, fmt.Errorf("%w: %w", ErrJobNotFound, err)
	}
	info, err := s.store.CancelInfo(ctx, keys)
	if errors.Is(err, jobstore.ErrNotFound) {
		return Cancelled{}, fmt.Errorf("%w: %s", ErrJobNotFound, id)
	}
	if err != nil {
		return Cancelled{}, fmt.Errorf("engine: cancel %s: %w", id, err)
	}
	if keys, err = s.keysFor(id, "", info.Dedup); err != nil {
		return Cancelled{}, fmt.Errorf("engine: cancel %s: %w", id, err)
	}
	// Callers check the reason (the API, the CLI); one that did not gets it stored escaped.
	res, err := s.store.Cancel(ctx, keys, jobstore.CancelArgs{Now: s.now(), By: freetext.Escape(req.By), Why: freetext.Escape(req.Why)})
	if err != nil {
		return Cancelled{}, fmt.Errorf("engine: cancel %s: %w", id, err)
	}
	switch res.State {
	case jobstore.CancelGone:
		return Cancelled{}, fmt.Errorf("%w: %s", ErrJobNotFound, id)
	case jobstore.Ended:
		return Cancelled{From: res.From}, fmt.Errorf("%w: it is %s", ErrEnded, res.From)
	}
	s.m.transitions.WithLabelValues(info.Type, "cancelled").Inc()
	s.endedIn(id, info.Workflow)
	out := Cancelled{From: res.From, Delivery: res.Delivery, Fence: res.Token}
	if res.From == jobstore.StatusProcessing {
		s.fenceElsewhere(ctx, CancelledRun{JobID: id, Type: info.Type, Resource: info.Resource, Token: res.Token})
	}
	if tc, ok := s.TaskConfig(info.Type); ok && res.From != jobstore.StatusProcessing {
		s.fairWithdraw(ctx, tc, id, res.From, info)
		s.fairEnded(ctx, tc, id, jobstore.StatusCancelled, nil) // the cancelled run's end frees a running one
	}
	if res.From != jobstore.StatusProcessing && res.Delivery != "" {
		// Best effort: the record is the truth, a delivery left behind is refused at its start.
		out.DeliveryDeleted = asynq.NewInspectorFromRedisClient(s.rdb).DeleteTask(info.Queue, res.Delivery) == nil
	}
	s.log.Info().Str("job_id", id).Str("event", "cancelled").Str("from", string(res.From)).Str("by", req.By).
		Int64("fencing_token", res.Token).Bool("delivery_deleted", out.DeliveryDeleted).Msg("job cancelled")
	return out, nil
}

// CancelledRun is a running job's cancel, for the stores outside Redis that its handler writes
// under its fence: Token is the token the cancel raised the resource's fence to.
type CancelledRun struct {
	JobID, Type, Resource string
	Token                 int64
}

// CancelHook raises a cancelled run's fence in a store outside Redis (the app's sqlfence), so
// that nothing the run writes there after the cancel's answer lands. It runs before Cancel
// returns, on the cancel's context.
type CancelHook func(ctx context.Context, run CancelledRun) error

// OnCancelRunning sets the hook every cancel of a running job runs before it returns (nil: none).
// Redis's fence is raised whatever the hook does: an error is logged, and the cancel stands.
func (s *Stack) OnCancelRunning(h CancelHook) {
	if h == nil {
		s.onCancelRunning.Store(nil)
		return
	}
	s.onCancelRunning.Store(&h)
}

func (s *Stack) fenceElsewhere(ctx context.Context, run CancelledRun) {
	h := s.onCancelRunning.Load()
	if h == nil {
		return
	}
	if err := (*h)(ctx, run); err != nil {
		s.log.Warn().Err(err).Str("job_id", run.JobID).Int64("fencing_token", run.Token).
			Msg("cancelled run's fence not raised outside Redis: its late writes there may land")
	}
}

// cancellable is the handler's context: ctx (asynq's, with its deadline and values), cancelled
// when the keeper loses the run's lease (hctx). A cancel deletes the lease, so the keeper's next
// renewal (within a third of the TTL) is refused; the record then says cancelled, and the cause
// becomes ErrCancelled instead of locking.ErrLeaseLost. One status read per lost lease, none per
// renewal. settle, called when the handler has returned, makes the cause final before conclude
// reads it; release frees the context.
func (s *Stack) cancellable(ctx, hctx context.Context, job *Job) (rctx context.Context, settle, release func()) {
	rctx, cancel := context.WithCancelCause(ctx)
	var once sync.Once
	relay := func() { once.Do(func() { cancel(s.runCause(hctx, job)) }) }
	stop := context.AfterFunc(hctx, relay)
	settle = func() {
		if !stop() {
			relay() // started (or about to): wait for it, so the cause is settled
		}
	}
	return rctx, settle, func() { cancel(context.Canceled) }
}

// runCause maps a lost lease whose job is cancelled to ErrCancelled.
func (s *Stack) runCause(hctx context.Context, job *Job) error {
	cause := context.Cause(hctx)
	if !errors.Is(cause, locking.ErrLeaseLost) {
		return cause
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(hctx), cancelStatusTimeout)
	defer cancel()
	if st, err := s.store.Status(rctx, job.keys); err == nil && st == jobstore.StatusCancelled {
		return fmt.Errorf("%w: job %s (its lease was taken by the cancel)", ErrCancelled, job.ID)
	}
	return cause
}

// cancelledRun ends a run whose job was cancelled under it. The finish is still sent with what
// the handler answered: the cancel raised the fence, so it is refused as stale and the timeline
// shows the late answer (stale_write_rejected); that refusal frees a fair job's admission when the
// cancel was of this run (cancelledRunReturned): the handler has returned, so a sequence's next job
// may start now, never beside it. asynq is told the delivery is done.
func (s *Stack) cancelledRun(ctx context.Context, job *Job, herr error, log zerolog.Logger) error {
	o := jobstore.Outcome{Status: jobstore.StatusDone}
	if herr != nil {
		msg := redact.Error(herr).Error()
		o = jobstore.Outcome{Status: jobstore.StatusFailed, Detail: msg, Error: msg}
	}
	_ = s.finish(ctx, job, o, log)
	log.Info().Str("event", "cancel_observed").Msg("job cancelled while running; handler stopped")
	return nil
}
