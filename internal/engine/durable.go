package engine

import (
	"context"
	"errors"
	"time"

	"github.com/hibiken/asynq"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// Durable mode (Config.DurableReplicas): the writes that make a promise wait for that many
// replicas (Redis WAIT, pipelined after the write: jobstore.Durability). What a shortfall means at
// each of them:
//   - enqueue: the confirmation (and the caller's Finally commands) ran on the master, so the job
//     stands there and will run unless a failover loses it; Enqueue returns ErrNotDurable (which
//     also satisfies ErrOutcomeUnknown) and the caller must not acknowledge the job. A retry with
//     the same operation key cannot apply its effect twice.
//   - start: the handler does not run. A start that granted a run is undone (status queued, the
//     attempt given back, the lease released) and the delivery bounces.
//   - finish of a done job: the delivery is kept (a bounce): its next delivery finds the job done
//     on the master and is acknowledged, or, after a failover that lost the status, runs the job
//     again, where an applied record that was made durable answers "already applied". Other
//     outcomes (retry, dead letter, revoke) answer asynq as they would: their status is a note,
//     and a lost one leaves the job processing until the rescuer or the reconciler finds it.
//   - Job.Apply: the effect and its applied record are on the master; Apply returns
//     ErrNotDurable and the handler should return it (a transient error): the retry finds the
//     operation applied, or, if a failover lost both, applies it once.

// ErrNotDurable: a write that makes a promise ran on the master, but fewer replicas than
// Config.DurableReplicas acknowledged it within Config.DurableTimeout; nothing that depends on it
// was acknowledged. It may still replicate, or be lost if the master fails now.
var ErrNotDurable = jobstore.ErrNotDurable

// Durability is durable mode's setting (jobstore.Durability): Exec runs a pipeline with a WAIT
// after it.
type Durability = jobstore.Durability

// Durability is the stack's durable mode (zero: off).
func (s *Stack) Durability() Durability { return s.store.Durability() }

// notDurable is the error of an enqueue whose confirmation was not acknowledged by the replicas:
// both ErrNotDurable and ErrOutcomeUnknown (the job stands on the master).
type notDurable struct{ err error }

func (e *notDurable) Error() string { return "engine: enqueue not durable: " + e.err.Error() }
func (e *notDurable) Unwrap() []error {
	return []error{e.err, ErrOutcomeUnknown}
}

// durability is the stack's durable mode for the store.
func (c Config) durability() jobstore.Durability {
	return jobstore.Durability{Replicas: c.DurableReplicas, Timeout: c.DurableTimeout}
}

// startNotDurable answers a start the replicas did not acknowledge: the handler does not run, a
// run the start granted is undone (best effort: its lease lapses within its TTL otherwise), and
// the delivery bounces without spending an attempt.
func (s *Stack) startNotDurable(ctx context.Context, t *asynq.Task, keys jobstore.Keys, tc TaskConfig, st jobstore.Started, delivery, owner string, sent time.Time, err error, log zerolog.Logger) error {
	if st.State == jobstore.Run {
		job := s.newJob(st, t, keys, tc, delivery, owner, sent)
		msg := "start not durable: " + err.Error()
		_ = s.finish(ctx, job, jobstore.Outcome{Status: jobstore.StatusQueued, Event: "requeued", Detail: msg, Error: msg, Refund: true}, log)
	}
	log.Warn().Str("event", "not_durable").Str("step", "start").Err(err).Msg("start not acknowledged by the replicas; handler not run")
	return s.bounce(tc.Type, "not_durable", 0, err)
}

// isNotDurable reports whether err is a durable-mode shortfall.
func isNotDurable(err error) bool { return errors.Is(err, ErrNotDurable) }
