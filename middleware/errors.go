package middleware

import (
	"time"

	"github.com/jobguard/jobguard/internal/engine"
)

// ErrSlotLost is the cause of a handler's context when its run's limit slot lapsed (its
// renewals failed for most of the slot's TTL, or Redis dropped it): the delivery bounces, not a
// failure (though asynq archives a bounce on a task's last retry, as it does a lost lease's).
var ErrSlotLost = engine.ErrSlotLost

// Permanent marks err as not worth retrying: the task goes to asynq's archive (dead letter) at
// once. At job level its job fails and can be replayed.
func Permanent(err error) error { return engine.Permanent(err) }

// RetryAfter marks err as an upstream asking to come back after d (a 429's Retry-After): the
// delivery comes back after d without spending an attempt (on a lease-level task's last retry, as
// a continuation that asynq delivers after d). At job level a job older than an hour counts it as
// a failed attempt instead.
func RetryAfter(err error, d time.Duration) error { return engine.RateLimited(err, d) }

// Revoked ends the task as no longer wanted, without retries or dead letter (asynq.RevokeTask at
// lease level; status revoked at job level).
func Revoked(reason string) error { return engine.Revoked(reason) }

// ErrNotDurable: with Config.DurableReplicas set, a write that makes a promise ran on the Redis
// master but fewer replicas acknowledged it within Config.DurableTimeout, so nothing that depends
// on it was acknowledged. From Enqueue the job stands on the master and may still run (as with an
// unknown outcome: it also satisfies errors.Is with the engine's outcome-unknown error); from
// Run.Apply the effect is on the master: return the error and the retry finds it applied.
var ErrNotDurable = engine.ErrNotDurable
