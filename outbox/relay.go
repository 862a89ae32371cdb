package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/locking"
)

// leaderResource is the lease the relays of a deployment share: one relays at a time.
const leaderResource = "outbox-relay"

// batch is the most rows one pass relays.
const batch = 100

// Relay hands committed outbox rows to the engine. Every worker may run one; the one that holds
// the leader lease relays, woken by NOTIFY and, as a fallback, every PollInterval.
type Relay struct {
	DB     *pgxpool.Pool
	Stack  *engine.Stack
	Client *asynq.Client
	// PollInterval is the fallback when a notification is missed (default 1s).
	PollInterval time.Duration
	// LeaseTTL is the leader lease's TTL (default 10s): a new leader within about it.
	LeaseTTL time.Duration
	Log      zerolog.Logger
}

func (r *Relay) defaults() {
	if r.PollInterval <= 0 {
		r.PollInterval = time.Second
	}
	if r.LeaseTTL <= 0 {
		r.LeaseTTL = 10 * time.Second
	}
}

// Run relays until ctx ends: it waits for the leader lease, then relays under it until the lease
// is lost, and tries again.
func (r *Relay) Run(ctx context.Context) {
	r.defaults()
	locks := r.Stack.Locks()
	keeper := locks.NewKeeper()
	defer keeper.Close()
	for ctx.Err() == nil {
		lease, err := locks.TryAcquire(ctx, leaderResource, r.LeaseTTL)
		if err != nil {
			if !errors.Is(err, locking.ErrNotAcquired) && ctx.Err() == nil {
				r.Log.Warn().Err(err).Msg("outbox relay: leader lease")
			}
			sleep(ctx, r.LeaseTTL/3)
			continue
		}
		lctx, stop := keeper.Keep(ctx, lease)
		if err := r.lead(lctx); err != nil && lctx.Err() == nil {
			r.Log.Warn().Err(err).Msg("outbox relay")
			sleep(lctx, r.PollInterval)
		}
		stop()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = lease.Release(rctx)
		cancel()
	}
}

// lead listens for notifications and relays until ctx ends or the connection fails.
func (r *Relay) lead(ctx context.Context) error {
	conn, err := r.DB.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("outbox: acquire a connection to listen: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
		return fmt.Errorf("outbox: listen: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_, _ = conn.Exec(uctx, "UNLISTEN "+Channel)
		cancel()
	}()
	for ctx.Err() == nil {
		if _, err := r.Pass(ctx); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, r.PollInterval)
		_, err := conn.Conn().WaitForNotification(wctx)
		cancel()
		if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("outbox: wait for a notification: %w", err)
		}
	}
	return nil
}

// Pass relays up to one batch of rows, each in a transaction of its own that locks it (FOR UPDATE
// SKIP LOCKED, so relays never wait on each other): its job is enqueued (a job that exists and is
// confirmed counts as relayed) and the row deleted, or, when the job can never be enqueued, the
// row is set aside (dead_at, last_error). A crash leaves the row to the next pass. It returns how
// many rows it relayed.
func (r *Relay) Pass(ctx context.Context) (int, error) {
	n := 0
	for n < batch {
		relayed, more, err := r.one(ctx)
		if err != nil || !more {
			return n, err
		}
		if relayed {
			n++
		}
	}
	return n, nil
}

// one relays the oldest row nobody else holds; more is false when there was none.
func (r *Relay) one(ctx context.Context) (relayed, more bool, err error) {
	err = pgx.BeginFunc(ctx, r.DB, func(tx pgx.Tx) error {
		var id int64
		var raw []byte
		err := tx.QueryRow(ctx, `SELECT id, spec FROM jobguard_outbox WHERE dead_at IS NULL ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED`).Scan(&id, &raw)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		more = true
		var sp spec
		done, err := false, json.Unmarshal(raw, &sp)
		if err == nil {
			done, err = r.relay(ctx, sp)
		}
		switch {
		case permanent(err):
			r.Log.Error().Err(err).Int64("outbox_id", id).Msg("outbox: a job that can never be enqueued is set aside")
			_, err = tx.Exec(ctx, `UPDATE jobguard_outbox SET dead_at = now(), last_error = $2 WHERE id = $1`, id, err.Error())
			return err
		case err != nil:
			return err
		case !done:
			more = false // an unconfirmed job of an earlier try: its claim runs out, retry later
			return nil
		}
		relayed = true
		_, err = tx.Exec(ctx, `DELETE FROM jobguard_outbox WHERE id = $1`, id)
		return err
	})
	return relayed, more, err
}

// permanent reports whether a row's job can never be enqueued as recorded.
func permanent(err error) bool {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	return errors.Is(err, engine.ErrUnknownType) || errors.Is(err, engine.ErrInvalidSpec) ||
		errors.As(err, &syntax) || errors.As(err, &typ)
}

// enqueueTimeout bounds one job's enqueue, so its claim is short if it fails half-way.
const enqueueTimeout = 5 * time.Second

// relay enqueues one row's job and reports whether the row may go: the job was created now, or
// earlier and confirmed. A job that exists but is not confirmed (an earlier enqueue that failed
// half-way; its claim runs out by itself) stays in the outbox for the next pass.
func (r *Relay) relay(ctx context.Context, sp spec) (bool, error) {
	ectx, cancel := context.WithTimeout(ctx, enqueueTimeout)
	defer cancel()
	_, err := r.Stack.Enqueue(ectx, r.Client, sp.engineSpec())
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, engine.ErrJobExists) {
		return false, fmt.Errorf("outbox: enqueue job %s: %w", sp.JobID, err)
	}
	v, err := r.Stack.Get(ectx, sp.JobID)
	if errors.Is(err, engine.ErrJobNotFound) {
		return false, nil // its claim ran out between the two calls: the next pass creates it
	}
	if err != nil {
		return false, fmt.Errorf("outbox: read job %s: %w", sp.JobID, err)
	}
	return v.Record.Confirmed, nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
