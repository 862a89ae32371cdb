// Package sqlfence applies jobguard's fencing rule to writes in PostgreSQL: a write made under a
// lease carries the lease's fencing token, and a write under a lower token, or under the same
// token from another owner, is refused and changes nothing. It is the same rule the Redis fence
// applies (locking's fence_check), as a compare-and-set in SQL, usable inside the caller's own
// transaction so the fence and the business rows commit together or not at all.
//
// It depends on pgx only (no Redis, no asynq): a handler carries its run's fence over as
// sqlfence.Fence{Token: f.Token, Owner: f.Owner}, with f := run.Fence() (middleware.Run).
//
// Guarantees: within a transaction, Write locks the resource's fence row until the transaction
// ends, so two writers of one resource serialise, and the one with the lower token (or a stale
// owner) fails with a *StaleError once the higher one has committed. What a refused transaction
// wrote before Write is the caller's to roll back (return the error from the transaction
// function, as InTx does). Not guaranteed: that tokens only grow — that is the lease's job.
package sqlfence

import (
	"context"
	_ "embed"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

var (
	//go:embed schema.sql
	schemaSQL string
	//go:embed write.sql
	writeSQL string
)

// Fence is a lease's fencing token and owner: locking.Fence's Token and Owner (its Counter stays
// in Redis).
type Fence struct {
	Token int64
	Owner string
}

// ErrStale is what every *StaleError is (errors.Is).
var ErrStale = errors.New("sqlfence: stale fencing token")

// StaleError says a higher token, or the same token from another owner, wrote the resource.
type StaleError struct {
	Resource string
	Token    int64
	// Current is the token that wrote the resource last.
	Current int64
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("sqlfence: token %d is stale for %s (current %d)", e.Token, e.Resource, e.Current)
}

// Is makes errors.Is(err, ErrStale) true.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// Querier is what Write needs: a pgx.Tx, a *pgx.Conn or a *pgxpool.Pool.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Schema is the DDL of the package's table (idempotent: CREATE ... IF NOT EXISTS), for a
// migration tool; Migrate runs it.
func Schema() string { return schemaSQL }

// Migrate creates the fence table if it is not there.
func Migrate(ctx context.Context, q Querier) error {
	if _, err := q.Exec(ctx, schemaSQL); err != nil {
		return fmt.Errorf("sqlfence: migrate: %w", err)
	}
	return nil
}

// Write records f as the resource's fence if it may write, else returns a *StaleError and
// changes nothing. Call it inside the transaction that makes the fenced writes, before them.
func Write(ctx context.Context, q Querier, resource string, f Fence) error {
	if f.Token <= 0 || f.Owner == "" {
		return fmt.Errorf("sqlfence: a fence needs a positive token and an owner")
	}
	var token int64
	err := q.QueryRow(ctx, writeSQL, resource, f.Token, f.Owner).Scan(&token)
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("sqlfence: write fence of %s: %w", resource, err)
	}
	var current int64
	if err := q.QueryRow(ctx, "SELECT token FROM jobguard_fences WHERE resource = $1", resource).Scan(&current); err != nil {
		return fmt.Errorf("sqlfence: read fence of %s: %w", resource, err)
	}
	return &StaleError{Resource: resource, Token: f.Token, Current: current}
}

// Beginner starts transactions: a *pgx.Conn or a *pgxpool.Pool.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// InTx runs fn in a transaction whose first statement is Write for (resource, f): fn's writes
// commit only with the fence, and nothing commits when the fence is stale or fn fails.
func InTx(ctx context.Context, db Beginner, resource string, f Fence, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := Write(ctx, tx, resource, f); err != nil {
			return err
		}
		return fn(tx)
	})
}
