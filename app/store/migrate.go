package store

import (
	"context"
	"database/sql"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/history"
	"github.com/jobguard/jobguard/outbox"
	"github.com/jobguard/jobguard/sqlfence"
	"github.com/jobguard/jobguard/tasks"
)

// The PostgreSQL schema is versioned with goose (a maintained migration library; its version
// table is goose_db_version): the core tables first, then each task's, at the task's own
// version, so a task added later migrates on its own. Every step is embedded in the binary.
const (
	versionFences  = 1
	versionOutbox  = 2
	versionHistory = 3
	// The history's list order (created_at and its index), so GET /jobs continues into SQL.
	versionHistoryList = 4
	// The history's tags (a tags column and its GIN index), so GET /jobs?tag= searches SQL too.
	versionHistorySearch = 5
)

// migrations lists every schema step, core and tasks', in version order.
func migrations(list []tasks.Task) []*goose.Migration {
	step := func(v int64, ddl string) *goose.Migration {
		return goose.NewGoMigration(v, &goose.GoFunc{RunTx: func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, ddl)
			return err
		}}, nil)
	}
	out := []*goose.Migration{
		step(versionFences, sqlfence.Schema()),
		step(versionOutbox, outbox.Schema()),
		step(versionHistory, history.Schema()),
		step(versionHistoryList, history.ListSchema()),
		step(versionHistorySearch, history.SearchSchema()),
	}
	for _, t := range list {
		if t.SQLSchema != "" {
			out = append(out, step(t.SQLVersion, t.SQLSchema))
		}
	}
	return out
}

// schema is the migration provider of pool for the tasks of list.
func schema(pool *pgxpool.Pool, list []tasks.Task) (*goose.Provider, func(), error) {
	db := stdlib.OpenDBFromPool(pool)
	p, err := goose.NewProvider(goose.DialectPostgres, db, nil, goose.WithGoMigrations(migrations(list)...))
	if err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("app: migrations: %w", err)
	}
	return p, func() { _ = db.Close() }, nil
}

// MigrateUp applies every pending step and reports them to out (nil: quietly).
func MigrateUp(ctx context.Context, pool *pgxpool.Pool, list []tasks.Task, out io.Writer) error {
	p, done, err := schema(pool, list)
	if err != nil {
		return err
	}
	defer done()
	res, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("app: migrate: %w", err)
	}
	for _, r := range res {
		if out != nil {
			fmt.Fprintf(out, "applied version %d in %s\n", r.Source.Version, r.Duration)
		}
	}
	return nil
}

// CheckSchema fails when the database lacks a step this binary needs (DATABASE_MIGRATE off).
func CheckSchema(ctx context.Context, pool *pgxpool.Pool, list []tasks.Task) error {
	p, done, err := schema(pool, list)
	if err != nil {
		return err
	}
	defer done()
	pending, err := p.HasPending(ctx)
	if err != nil {
		return fmt.Errorf("app: read the schema version: %w", err)
	}
	if pending {
		return &config.Error{Var: "DATABASE_MIGRATE", Err: fmt.Errorf("the database lacks schema steps this binary needs: run `jobguard migrate` or set DATABASE_MIGRATE=true")}
	}
	return nil
}
