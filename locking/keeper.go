package locking

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Keeper renews every lease a process holds, in batches: on each tick, all leases that are due
// (a third of their TTL since the last renewal) or will be within the next RenewAhead are renewed
// in one pipeline, which go-redis sends as one round trip per Redis node.
type Keeper struct {
	c          *Client
	tick       time.Duration
	renewAhead time.Duration
	onRenew    func(n int, err error)

	mu   sync.Mutex
	held map[*Lease]*kept

	stop chan struct{}
	done chan struct{}
}

type kept struct {
	cancel    context.CancelCauseFunc
	expiry    *time.Timer
	nextRenew time.Time
}

// KeeperOption configures a Keeper.
type KeeperOption func(*Keeper)

// WithTick sets how often the keeper looks for due leases (default 100ms). A tick with nothing due
// costs no round trip.
func WithTick(d time.Duration) KeeperOption { return func(k *Keeper) { k.tick = d } }

// WithRenewAhead renews, together with the due leases, those due within d (default 1s), so that
// leases taken at different times share round trips.
func WithRenewAhead(d time.Duration) KeeperOption { return func(k *Keeper) { k.renewAhead = d } }

// WithRenewHook calls fn after each batch with its size and error (nil when the round trip
// succeeded, whatever each lease's answer was); for metrics.
func WithRenewHook(fn func(n int, err error)) KeeperOption {
	return func(k *Keeper) { k.onRenew = fn }
}

// NewKeeper starts a keeper; Close stops it.
func (c *Client) NewKeeper(opts ...KeeperOption) *Keeper {
	k := &Keeper{
		c: c, tick: 100 * time.Millisecond, renewAhead: time.Second,
		held: map[*Lease]*kept{}, stop: make(chan struct{}), done: make(chan struct{}),
	}
	for _, o := range opts {
		o(k)
	}
	go k.loop()
	return k
}

// Keep renews l until stop is called, and returns a context derived from parent that is cancelled
// with a cause wrapping ErrLeaseLost as soon as the lease is refused, a renewal fails, or its
// validity runs out without a renewal. stop (idempotent) ends the renewals and cancels the context;
// it does not release the lease.
func (k *Keeper) Keep(parent context.Context, l *Lease) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	if err := l.Err(); err != nil {
		cancel(err)
		return ctx, func() {}
	}
	kp := &kept{cancel: cancel, nextRenew: k.c.clock.Now().Add(l.TTL / 3)}
	// The deadline is checked by a timer too, so a keeper that cannot reach Redis (or a process
	// that was paused) still cancels the work when the lease can no longer be trusted.
	kp.expiry = time.AfterFunc(l.ValidFor(), func() { k.lose(l, fmt.Errorf("%w: %q not renewed within its validity", ErrLeaseLost, l.Resource)) })
	k.mu.Lock()
	k.held[l] = kp
	k.mu.Unlock()
	return ctx, func() {
		k.mu.Lock()
		kp, ok := k.held[l]
		delete(k.held, l)
		k.mu.Unlock()
		if ok {
			kp.expiry.Stop()
			kp.cancel(nil)
		}
	}
}

// Held is how many leases the keeper renews.
func (k *Keeper) Held() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.held)
}

// Close stops renewing. Contexts of leases still kept are cancelled with ErrLeaseLost, since
// nothing renews them any more.
func (k *Keeper) Close() {
	select {
	case <-k.stop:
		return
	default:
	}
	close(k.stop)
	<-k.done
	k.mu.Lock()
	held := k.held
	k.held = map[*Lease]*kept{}
	k.mu.Unlock()
	for l, kp := range held {
		kp.expiry.Stop()
		kp.cancel(l.markLost(fmt.Errorf("%w: keeper closed", ErrLeaseLost)))
	}
}

func (k *Keeper) lose(l *Lease, cause error) {
	k.mu.Lock()
	kp, ok := k.held[l]
	delete(k.held, l)
	k.mu.Unlock()
	cause = l.markLost(cause)
	if ok {
		kp.expiry.Stop()
		kp.cancel(cause)
	}
}

func (k *Keeper) loop() {
	defer close(k.done)
	t := time.NewTicker(k.tick)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-t.C:
			k.renewDue()
		}
	}
}

// RenewNow renews every kept lease at once, in one batch; for tests and for callers that know a
// long pause is coming.
func (k *Keeper) RenewNow() { k.renew(k.due(time.Duration(1 << 62))) }

func (k *Keeper) renewDue() {
	if batch := k.due(k.renewAhead); len(batch) > 0 {
		k.renew(batch)
	}
}

func (k *Keeper) due(ahead time.Duration) []*Lease {
	now := k.c.clock.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	anyDue := false
	for _, kp := range k.held {
		if !now.Before(kp.nextRenew) {
			anyDue = true
			break
		}
	}
	if !anyDue && ahead < time.Duration(1<<62) {
		return nil
	}
	var batch []*Lease
	for l, kp := range k.held {
		if !now.Add(ahead).Before(kp.nextRenew) {
			batch = append(batch, l)
		}
	}
	return batch
}

func (k *Keeper) renew(batch []*Lease) {
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), k.timeout(batch))
	defer cancel()
	sent := k.c.clock.Now()
	cmds, err := k.pipeline(ctx, batch)
	if err != nil && isNoScript(err) {
		// First batch after a Redis restart or failover: load the script on every node, retry.
		if lerr := renewScript.Load(ctx, k.c.rdb).Err(); lerr == nil {
			cmds, err = k.pipeline(ctx, batch)
		}
	}
	if k.onRenew != nil {
		k.onRenew(len(batch), err)
	}
	for i, l := range batch {
		ok, cerr := cmds[i].Int64()
		switch {
		case cerr != nil:
			k.lose(l, fmt.Errorf("%w: renew of %q: %w", ErrRenewFailed, l.Resource, cerr))
		case ok == 0:
			k.lose(l, fmt.Errorf("%w: renew of %q refused: expired or taken over", ErrLeaseLost, l.Resource))
		default:
			l.extended(sent)
			k.mu.Lock()
			if kp, held := k.held[l]; held {
				kp.nextRenew = sent.Add(l.TTL / 3)
				kp.expiry.Reset(l.ValidFor())
			}
			k.mu.Unlock()
		}
	}
}

func (k *Keeper) pipeline(ctx context.Context, batch []*Lease) ([]*redis.Cmd, error) {
	pipe := k.c.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(batch))
	for i, l := range batch {
		keys, args := l.renewArgs()
		cmds[i] = renewScript.EvalSha(ctx, pipe, keys, args...)
	}
	_, err := pipe.Exec(ctx)
	if err != nil && !errors.Is(err, redis.Nil) {
		for _, c := range cmds {
			if isNoScript(c.Err()) {
				return cmds, c.Err()
			}
		}
	}
	return cmds, err
}

// timeout bounds one batch by the shortest validity in it: a renewal that arrives after the lease
// can no longer be trusted is of no use.
func (k *Keeper) timeout(batch []*Lease) time.Duration {
	d := 5 * time.Second
	for _, l := range batch {
		if v := l.ValidFor(); v > 0 && v < d {
			d = v
		}
	}
	return d
}
