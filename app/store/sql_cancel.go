package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/sqlfence"
	"github.com/jobguard/jobguard/tasks"
)

// CancelFenceHook is the cancel hook of a process with PostgreSQL: a cancelled run of a SQLFenced
// task type has its sqlfence row raised to the cancel's token, so its handler's later commit
// under its own (lower) token is refused. The upsert waits for the row's lock: a run whose
// transaction already wrote the fence commits first, before the cancel's answer, and then no more.
func CancelFenceHook(db *pgxpool.Pool, list []tasks.Task) engine.CancelHook {
	fenced := map[string]bool{}
	for _, t := range list {
		if t.SQLFenced {
			fenced[t.Type] = true
		}
	}
	return func(ctx context.Context, run engine.CancelledRun) error {
		if !fenced[run.Type] {
			return nil
		}
		err := sqlfence.Write(ctx, db, tasks.SQLFenceResource(run.Type, run.Resource), sqlfence.Fence{Token: run.Token, Owner: "cancel:" + run.JobID})
		if errors.Is(err, sqlfence.ErrStale) {
			return nil // a newer run wrote the resource already: its token is higher still
		}
		return err
	}
}
