package locking

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// HeldError is the ErrNotAcquired answer: another owner holds the lease for about Remaining.
type HeldError struct {
	Resource  string
	Remaining time.Duration
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("locking: lease on %q held by another owner for %s more", e.Resource, e.Remaining)
}

// Is makes errors.Is(err, ErrNotAcquired) true.
func (e *HeldError) Is(target error) bool { return target == ErrNotAcquired }

// Fence is what a fenced write carries: the lease's token and owner, and the key of the
// resource's fence counter.
type Fence struct {
	Token int64
	Owner string
	// Counter, when set, is the resource's fence counter (Client.FenceKey): a fenced write is then
	// also refused once the counter has moved past Token, i.e. once anyone drew a newer token for
	// the resource (a later lease, or a job's cancel), even if that newer token has not written
	// this target yet. A fence from Lease.Fence always has it; "" checks the target's record only
	// (a token carried in from elsewhere).
	Counter string
}

// Lease is one acquisition of a resource. Its methods are safe for concurrent use.
type Lease struct {
	Resource string
	Owner    string
	Token    int64
	TTL      time.Duration

	c          *Client
	mu         sync.Mutex
	validUntil time.Time
	lost       error
	beatKey    string
	beatField  string
}

// StampHeartbeat makes every renewal of the lease also set field of the hash at key (in the
// resource's slot, e.g. a job record) to the renewal time in unix ms, if the hash exists. Call it
// before the lease is kept.
func (l *Lease) StampHeartbeat(key, field string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.beatKey, l.beatField = key, field
}

// renewArgs are the keys and arguments of renew.lua for this lease.
func (l *Lease) renewArgs() ([]string, []any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	keys := []string{l.c.LeaseKey(l.Resource)}
	if l.beatKey != "" {
		keys = append(keys, l.beatKey)
	}
	return keys, []any{l.Owner, ms(l.TTL), l.beatField, time.Now().UnixMilli()}
}

// Fence returns the token and owner that fenced writes under this lease carry.
func (l *Lease) Fence() Fence {
	return Fence{Token: l.Token, Owner: l.Owner, Counter: l.c.FenceKey(l.Resource)}
}

// ValidFor is how much longer the lease may be trusted: TTL minus the safety margin since the last
// successful acquire or renew was sent, and 0 once it was lost.
func (l *Lease) ValidFor() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil {
		return 0
	}
	if d := l.validUntil.Sub(l.c.clock.Now()); d > 0 {
		return d
	}
	return 0
}

// Expired reports whether the lease may no longer be trusted.
func (l *Lease) Expired() bool { return l.ValidFor() == 0 }

// Err is nil while the lease was not lost, else why it was (wrapping ErrLeaseLost).
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

func (l *Lease) markLost(cause error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost == nil {
		l.lost = cause
	}
	return l.lost
}

// extended records a renewal that was sent at sent and accepted.
func (l *Lease) extended(sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost == nil {
		l.validUntil = sent.Add(l.TTL - l.c.margin(l.TTL))
	}
}

type acquireConfig struct {
	fenceTTL time.Duration
	floor    int64
}

// AcquireOption configures one acquisition.
type AcquireOption func(*acquireConfig)

// WithFenceTTL gives the resource's fence counter a TTL, refreshed on every acquisition. Only for
// resources that die with their job: the counter must outlive every target holding one of its
// tokens, or a later acquisition could draw a token some target has already seen.
func WithFenceTTL(d time.Duration) AcquireOption { return func(a *acquireConfig) { a.fenceTTL = d } }

// WithTokenFloor makes the drawn token greater than floor (default 0), even when the resource's
// fence counter expired or was lost: pass the highest token a target of the resource has seen.
func WithTokenFloor(floor int64) AcquireOption { return func(a *acquireConfig) { a.floor = floor } }

// TryAcquire takes the lease on resource for ttl if nobody holds it. When someone does, the error
// is a *HeldError (errors.Is ErrNotAcquired).
func (c *Client) TryAcquire(ctx context.Context, resource string, ttl time.Duration, opts ...AcquireOption) (*Lease, error) {
	if err := ValidateResource(resource); err != nil {
		return nil, err
	}
	if ttl < time.Millisecond {
		return nil, fmt.Errorf("locking: ttl %s is shorter than 1ms", ttl)
	}
	var ac acquireConfig
	for _, o := range opts {
		o(&ac)
	}
	owner := c.newOwner()
	sent := c.clock.Now()
	res, err := acquireScript.Run(ctx, c.rdb,
		[]string{c.LeaseKey(resource), c.FenceKey(resource)},
		owner, ms(ttl), ms(ac.fenceTTL), max(ac.floor, 0)).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("locking: acquire %q: %w", resource, err)
	}
	if len(res) != 2 {
		// {1} alone: this owner's retry found no fence counter (a fence TTL shorter than the lease).
		return nil, fmt.Errorf("locking: acquire %q: unexpected reply %v", resource, res)
	}
	if res[0] == 0 {
		return nil, &HeldError{Resource: resource, Remaining: time.Duration(res[1]) * time.Millisecond}
	}
	return &Lease{
		Resource: resource, Owner: owner, Token: res[1], TTL: ttl,
		c: c, validUntil: sent.Add(ttl - c.margin(ttl)),
	}, nil
}

// Acquire waits for the lease on resource, retrying with jittered exponential backoff (10ms
// doubling up to 1s, never past the holder's remaining TTL) until it is granted or ctx ends, in
// which case the error wraps context.Cause(ctx).
func (c *Client) Acquire(ctx context.Context, resource string, ttl time.Duration, opts ...AcquireOption) (*Lease, error) {
	backoff := 10 * time.Millisecond
	for {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("locking: acquire %q: %w", resource, context.Cause(ctx))
		}
		l, err := c.TryAcquire(ctx, resource, ttl, opts...)
		held, ok := err.(*HeldError)
		if !ok {
			if err != nil && ctx.Err() != nil {
				return nil, fmt.Errorf("locking: acquire %q: %w", resource, context.Cause(ctx))
			}
			return l, err
		}
		wait := backoff
		if held.Remaining > 0 && held.Remaining < wait {
			wait = held.Remaining
		}
		wait = wait/2 + rand.N(wait/2+1)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("locking: acquire %q: %w", resource, context.Cause(ctx))
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// Granted wraps a lease that the caller's own script acquired (NewProtocolScript's lease_acquire on
// LeaseKey and FenceKey) so that it can be kept, renewed and released like one from TryAcquire.
// sent is when the script was sent.
func (c *Client) Granted(resource, owner string, token int64, ttl time.Duration, sent time.Time) *Lease {
	return &Lease{Resource: resource, Owner: owner, Token: token, TTL: ttl, c: c, validUntil: sent.Add(ttl - c.margin(ttl))}
}

// Now is the client's clock.
func (c *Client) Now() time.Time { return c.clock.Now() }

// Renew extends the lease by its TTL. A refused renewal (the lease expired or another owner holds
// it) returns ErrLeaseLost and marks the lease lost; so does a failed one, with ErrRenewFailed,
// since whether Redis applied it is unknown.
func (l *Lease) Renew(ctx context.Context) error {
	if err := l.Err(); err != nil {
		return err
	}
	sent := l.c.clock.Now()
	keys, args := l.renewArgs()
	ok, err := renewScript.Run(ctx, l.c.rdb, keys, args...).Int64()
	if err != nil {
		return l.markLost(fmt.Errorf("%w: renew of %q: %w", ErrRenewFailed, l.Resource, err))
	}
	if ok == 0 {
		return l.markLost(fmt.Errorf("%w: renew of %q refused: expired or taken over", ErrLeaseLost, l.Resource))
	}
	l.extended(sent)
	return nil
}

// Release deletes the lease if this owner still holds it. It reports ErrLeaseLost when the lease
// had already expired or been taken over (nothing is deleted then). After Release the lease is no
// longer valid.
func (l *Lease) Release(ctx context.Context) error {
	ok, err := releaseScript.Run(ctx, l.c.rdb, []string{l.c.LeaseKey(l.Resource)}, l.Owner).Int64()
	l.markLost(fmt.Errorf("%w: released", ErrLeaseLost))
	if err != nil {
		return fmt.Errorf("locking: release %q: %w", l.Resource, err)
	}
	if ok == 0 {
		return fmt.Errorf("%w: %q had expired or been taken over before release", ErrLeaseLost, l.Resource)
	}
	return nil
}

// LeaseInfo is a snapshot of a resource's lease, for debugging views.
type LeaseInfo struct {
	// Owner holds the lease; empty when it is free.
	Owner string `json:"owner,omitempty"`
	// Remaining is the lease's remaining TTL in Redis; 0 when free.
	Remaining time.Duration `json:"remaining_ttl"`
	// Fence is the last token drawn for the resource; 0 when none ever was.
	Fence int64 `json:"current_fence"`
}

// Inspect reads the lease and fence of resource in one round trip.
func (c *Client) Inspect(ctx context.Context, resource string) (LeaseInfo, error) {
	if err := ValidateResource(resource); err != nil {
		return LeaseInfo{}, err
	}
	res, err := inspectScript.Run(ctx, c.rdb, []string{c.LeaseKey(resource), c.FenceKey(resource)}).Slice()
	if err != nil {
		return LeaseInfo{}, fmt.Errorf("locking: inspect %q: %w", resource, err)
	}
	var info LeaseInfo
	if owner, ok := res[0].(string); ok {
		info.Owner = owner
	}
	if ttl, _ := res[1].(int64); ttl > 0 {
		info.Remaining = time.Duration(ttl) * time.Millisecond
	}
	info.Fence, _ = res[2].(int64)
	return info, nil
}

// isNoScript reports whether err is Redis's NOSCRIPT reply to an EVALSHA.
func isNoScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }
