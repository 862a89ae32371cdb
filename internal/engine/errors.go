package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hibiken/asynq"
)

// Sentinel errors, inspected with errors.Is.
var (
	// ErrAlreadyApplied: the operation of Job.Apply was applied before; nothing changed.
	ErrAlreadyApplied = errors.New("engine: operation already applied")
	// ErrInvalidJobID: a delivery carries no usable job id.
	ErrInvalidJobID = errors.New("engine: invalid job id")
	// ErrUnknownType: the task type was never registered.
	ErrUnknownType = errors.New("engine: unknown task type")
	// ErrBounced marks a delivery that was sent back without spending an attempt.
	ErrBounced = errors.New("engine: delivery bounced")
)

// class is how a handler's error is treated.
type class int

const (
	classTransient class = iota
	classRateLimited
	classPermanent
	classRevoked
)

// classified carries an error's class (and Retry-After) from the handler to the engine.
type classified struct {
	class      class
	retryAfter time.Duration
	err        error
}

func (e *classified) Error() string { return e.err.Error() }
func (e *classified) Unwrap() error { return e.err }

// Transient marks err as worth retrying with backoff; it is also how an unmarked error is treated.
func Transient(err error) error { return &classified{class: classTransient, err: err} }

// RateLimited marks err as the upstream asking to come back after retryAfter: the delivery bounces
// without spending an attempt, unless the job is older than its task type's RateLimitMaxAge, when it
// counts as a transient failure.
func RateLimited(err error, retryAfter time.Duration) error {
	return &classified{class: classRateLimited, retryAfter: retryAfter, err: err}
}

// Permanent marks err as not worth retrying: the job fails at once and goes to the dead letter
// queue (asynq's archive), from where it can be replayed.
func Permanent(err error) error { return &classified{class: classPermanent, err: err} }

// Revoked marks the job as no longer wanted: it ends as revoked, without retries or dead letter.
func Revoked(reason string) error {
	return &classified{class: classRevoked, err: fmt.Errorf("revoked: %s", reason)}
}

func classOf(err error) (class, time.Duration) {
	var c *classified
	if errors.As(err, &c) {
		return c.class, c.retryAfter
	}
	return classTransient, 0
}

// Backoff is exponential backoff with full jitter: the delay before attempt n+1 is uniform in
// [0, min(Max, Base·2^(n-1))], never below asynq's 1 s scheduling tick.
type Backoff struct {
	Base time.Duration // default 1s
	Max  time.Duration // default 5m
}

func (b Backoff) withDefaults() Backoff {
	if b.Base <= 0 {
		b.Base = time.Second
	}
	if b.Max <= 0 {
		b.Max = 5 * time.Minute
	}
	return b
}

// Cap is the largest delay after failed attempt n (1-based).
func (b Backoff) Cap(n int) time.Duration {
	b = b.withDefaults()
	d := b.Base
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

// Delay draws the delay after failed attempt n with r (rand.N when nil).
func (b Backoff) Delay(n int, r *rand.Rand) time.Duration {
	c := b.Cap(n)
	var d time.Duration
	if r == nil {
		d = rand.N(c + 1)
	} else {
		d = time.Duration(r.Int64N(int64(c) + 1))
	}
	return max(d, minDelay)
}

// minDelay is the floor of every retry and bounce delay: asynq moves due retries back to pending on
// its DelayedTaskCheckInterval, which jobguard sets to 1 s.
const minDelay = time.Second

// delayed tells asynq's RetryDelayFunc (and IsFailure) what the engine decided.
type delayed struct {
	delay  time.Duration
	bounce bool
	reason string
	err    error
}

func (e *delayed) Error() string {
	if e.bounce {
		return "bounced (" + e.reason + "): " + e.err.Error()
	}
	return e.err.Error()
}

func (e *delayed) Unwrap() error { return e.err }

// Is makes errors.Is(err, ErrBounced) true for bounces.
func (e *delayed) Is(target error) bool { return e.bounce && target == ErrBounced }

// RetryDelay is asynq's RetryDelayFunc for servers running the stack: the delay the engine
// chose, or the default backoff for errors that did not pass through it.
func RetryDelay(n int, err error, _ *asynq.Task) time.Duration {
	var d *delayed
	if errors.As(err, &d) {
		return d.delay
	}
	return Backoff{}.Delay(n+1, nil)
}

// IsFailure is asynq's IsFailure for servers running the stack: bounces are not failures, so asynq
// neither counts them as retries nor as failed.
func IsFailure(err error) bool { return !errors.Is(err, ErrBounced) }

// Bounce is a delivery sent back without spending an attempt, after at least after (and asynq's
// tick), with a jitter of BounceDelay's size: for adapters outside the stack that bounce on the
// stack's terms (the middleware's lease level).
func Bounce(reason string, after time.Duration, err error) error {
	return &delayed{bounce: true, reason: reason, delay: max(after, minDelay+rand.N(minDelay+1)), err: err}
}

// DelayOf is the delay the engine chose for err (a bounce, a retry it decided), if it chose one.
func DelayOf(err error) (time.Duration, bool) {
	var d *delayed
	if errors.As(err, &d) {
		return d.delay, true
	}
	return 0, false
}

// Class names how a handler's error is treated ("transient", "rate_limited", "permanent",
// "revoked"), and the upstream's Retry-After for a rate limit.
func Class(err error) (string, time.Duration) {
	c, after := classOf(err)
	return [...]string{"transient", "rate_limited", "permanent", "revoked"}[c], after
}
