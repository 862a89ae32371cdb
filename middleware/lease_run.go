package middleware

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/hibiken/asynq"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/locking"
)

// finishTimeout bounds the finish script, on a context that outlives the delivery's.
const finishTimeout = 5 * time.Second

// serveLease runs one lease-level delivery: its key's limit slot (when limited), start
// (superseded and stale-copy checks, lease and fence, run marker), the handler with its lease and
// slot kept, finish (release, marker), the slot's release, and asynq's answer.
func (g *Guard) serveLease(ctx context.Context, t *asynq.Task, next asynq.Handler, l Lease) (err error) {
	taskID, _ := asynq.GetTaskID(ctx)
	resource, err := resourceOf(l, t)
	if err == nil {
		err = locking.ValidateResource(resource)
	}
	if err != nil {
		g.m.outcomes.WithLabelValues(t.Type(), "invalid").Inc()
		return fmt.Errorf("middleware: %s task %s: resource: %w: %w", t.Type(), taskID, err, asynq.SkipRetry)
	}
	opKey, err := opKeyOf(t, l, taskID)
	if err != nil {
		g.m.outcomes.WithLabelValues(t.Type(), "invalid").Inc()
		return fmt.Errorf("middleware: %s task %s: op key: %w: %w", t.Type(), taskID, err, asynq.SkipRetry)
	}
	prev := continues(t, taskID)
	k := g.leaseKeys(resource, taskID, prev)
	owner := g.locks.NewOwner()
	slot, err := g.takeSlot(ctx, t, l, owner)
	if err != nil {
		g.m.outcomes.WithLabelValues(t.Type(), "bounced").Inc()
		return err
	}
	// After the finish (deferred below, so run first), or at once for a delivery that does not run.
	defer slot.Release(ctx)
	st, sent, err := g.startLease(ctx, k, leaseStartArgs{owner: owner, ttl: l.TTL, taskID: taskID, isCopy: prev != "", fenceTTL: l.FenceTTL})
	log := g.log.With().Str("type", t.Type()).Str("delivery", taskID).Str("worker_id", g.cfg.WorkerID).Logger()
	switch {
	case errors.Is(err, engine.ErrNotDurable):
		// The handler does not run on a start the replicas may not have: give a lease it took back.
		if st.state == "run" {
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
			_, _ = runLeaseFinish(fctx, g.stack.Store().RunScript, k, owner)
			cancel()
		}
		g.m.outcomes.WithLabelValues(t.Type(), "bounced").Inc()
		log.Warn().Str("event", "not_durable").Str("step", "start").Err(err).Msg("lease start not acknowledged by the replicas; handler not run")
		return engine.Bounce("not_durable", 0, err)
	case err != nil:
		// Unknown whether it ran: a lease it took lapses within its TTL; try again soon.
		return engine.Bounce("start_failed", 0, err)
	case st.state == "superseded", st.state == "stale_copy":
		g.m.outcomes.WithLabelValues(t.Type(), st.state).Inc()
		log.Info().Str("event", "stale_delivery").Str("state", st.state).Str("by", st.by).Msg("delivery acknowledged without running")
		return nil
	case st.state == "held":
		g.m.outcomes.WithLabelValues(t.Type(), "bounced").Inc()
		return engine.Bounce("lease_not_acquired", 0, errors.New("resource lease held by another run"))
	}
	lease := g.locks.Granted(resource, owner, st.token, l.TTL, sent)
	run := &Run{lease: lease, locks: g.locks, taskID: taskID, opKey: opKey, appliedTTL: l.AppliedTTL,
		resource: resource, attempt: attemptOf(ctx), slot: slot, durable: g.stack.Durability()}
	hctx, stop := g.keeper.Keep(ctx, lease)
	hctx, unwatch := slot.Watch(hctx)
	defer func() {
		if p := recover(); p != nil {
			log.Error().Str("event", "panic").Bytes("stack", debug.Stack()).Msg("handler panicked")
			err = fmt.Errorf("middleware: handler panicked: %v", p)
		}
		unwatch()
		stop()
		if err == nil {
			g.finishLeaseLater(ctx, t.Type(), k, owner, slot, log)
			return
		}
		err = g.finishLease(ctx, hctx, t, k, owner, slot, err, log)
	}()
	return next.ProcessTask(withRun(hctx, run), t)
}

// startLease runs the start script. A delivery on its last retry does not bounce when the
// resource is held or the start failed (asynq archives a task whose retries are spent before it
// asks IsFailure): it asks again here, as the holder's TTL runs out, until ctx ends.
func (g *Guard) startLease(ctx context.Context, k leaseKeys, a leaseStartArgs) (leaseStarted, time.Time, error) {
	last := lastRetry(ctx)
	for wait := 10 * time.Millisecond; ; wait = min(wait*2, time.Second) {
		sent := g.locks.Now()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
		st, err := runLeaseStart(sctx, g.stack.Store().RunScriptDurable, k, a)
		cancel()
		if !last || (err == nil && st.state != "held") {
			return st, sent, err
		}
		// A failed start (Redis away for a moment) is asked again too: the same owner's retry of a
		// start that did run gets its own lease back, not a second token.
		pause := wait
		if err == nil {
			pause = min(wait, max(st.wait, time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return st, sent, err
		case <-time.After(pause):
		}
	}
}

// finishLease releases the run's lease and marker, and turns the handler's error into asynq's
// answer (an upstream's RetryAfter also pushes back the next starts of the slot's key).
func (g *Guard) finishLease(ctx, hctx context.Context, t *asynq.Task, k leaseKeys, owner string, slot *engine.Slot, herr error, log zerolog.Logger) error {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	fin, ferr := runLeaseFinish(fctx, g.stack.Store().RunScript, k, owner)
	cancel()
	if ferr == nil && fin.superseded {
		// A rescue handed the task to a copy while this run was lost: the copy's run counts.
		g.m.outcomes.WithLabelValues(t.Type(), "superseded").Inc()
		return nil
	}
	if cause := context.Cause(hctx); errors.Is(cause, locking.ErrLeaseLost) && herr != nil {
		g.m.outcomes.WithLabelValues(t.Type(), "lease_lost").Inc()
		log.Warn().Str("event", "lease_lost").Err(cause).Msg("lease lost during the run")
		return g.bounce(ctx, t, k, "lease_lost", 0, herr)
	}
	if cause := context.Cause(hctx); errors.Is(cause, engine.ErrSlotLost) && herr != nil {
		g.m.outcomes.WithLabelValues(t.Type(), "slot_lost").Inc()
		log.Warn().Str("event", "slot_lost").Err(cause).Msg("limit slot lost during the run")
		return g.bounce(ctx, t, k, "slot_lost", 0, herr)
	}
	if herr == nil {
		g.m.outcomes.WithLabelValues(t.Type(), "done").Inc()
		return nil
	}
	switch class, after := engine.Class(herr); class {
	case "permanent":
		g.m.outcomes.WithLabelValues(t.Type(), "failed").Inc()
		return fmt.Errorf("%w: %w", herr, asynq.SkipRetry)
	case "revoked":
		g.m.outcomes.WithLabelValues(t.Type(), "revoked").Inc()
		return fmt.Errorf("%w: %w", herr, asynq.RevokeTask)
	case "rate_limited":
		if slot != nil {
			slot.PushBack(after)
		}
		g.m.outcomes.WithLabelValues(t.Type(), "bounced").Inc()
		return g.bounce(ctx, t, k, "rate_limited", after, herr)
	}
	g.m.outcomes.WithLabelValues(t.Type(), "retried").Inc()
	return herr
}

// bounce sends a run that ended without its work done back to asynq without spending an attempt;
// on the task's last retry, where asynq would archive it, it hands the task off to a continuation.
func (g *Guard) bounce(ctx context.Context, t *asynq.Task, k leaseKeys, reason string, after time.Duration, err error) error {
	b := engine.Bounce(reason, after, err)
	if !lastRetry(ctx) {
		return b
	}
	delay, _ := engine.DelayOf(b)
	if herr := g.handOff(ctx, t, k, delay); herr != nil {
		return b
	}
	return nil
}

func (g *Guard) leaseKeys(resource, taskID, prev string) leaseKeys {
	k := leaseKeys{lease: g.locks.LeaseKey(resource), fence: g.locks.FenceKey(resource), marker: runMarkerKey(g.locks, resource, taskID)}
	k.prevMarker = k.marker
	if prev != "" {
		k.prevMarker = runMarkerKey(g.locks, resource, prev)
	}
	return k
}

// opKeyOf is the run's op key: Lease.OpKey's, else the first task of its chain of rescues.
func opKeyOf(t *asynq.Task, l Lease, taskID string) (key string, err error) {
	if l.OpKey == nil {
		return rootOf(t, taskID), nil
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the OpKey function panicked: %v", p)
		}
	}()
	return l.OpKey(t), nil
}

// resourceOf is Lease.Resource's answer, a panic turned into its error.
func resourceOf(l Lease, t *asynq.Task) (resource string, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the Resource function panicked: %v", p)
		}
	}()
	return l.Resource(t)
}

func attemptOf(ctx context.Context) int {
	n, _ := asynq.GetRetryCount(ctx)
	return n + 1
}
