package app

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/history"
	"github.com/jobguard/jobguard/internal/redact"
	"github.com/jobguard/jobguard/outbox"
	"github.com/jobguard/jobguard/sqlfence"
	"github.com/jobguard/jobguard/tasks"
)

// sqlPingTimeout bounds the start-up check that PostgreSQL answers.
const sqlPingTimeout = 5 * time.Second

// openSQL returns the process's PostgreSQL pool when DATABASE_URL is set (nil otherwise), with
// the fence table and every task's schema in place. One pool per process: every handler may hold
// a connection for its transaction while the API's read models use the rest.
func openSQL(ctx context.Context, cfg Config) (*pgxpool.Pool, error) {
	if cfg.DatabaseURL == "" {
		return nil, nil
	}
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, &ConfigError{Var: "DATABASE_URL", Err: redact.Error(err)}
	}
	pc.MaxConns = int32(cfg.WorkerConcurrency + 4)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("app: postgres: %w", redact.Error(err))
	}
	pctx, cancel := context.WithTimeout(ctx, sqlPingTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("app: postgres at %s does not answer: %w", pc.ConnConfig.Host, redact.Error(err))
	}
	if err := migrateSQL(pctx, pool, cfg.Tasks); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// migrateSQL creates the fence table, the outbox, the job history and every registered task's
// tables.
func migrateSQL(ctx context.Context, pool *pgxpool.Pool, list []tasks.Task) error {
	if err := sqlfence.Migrate(ctx, pool); err != nil {
		return fmt.Errorf("app: %w", err)
	}
	if err := outbox.Migrate(ctx, pool); err != nil {
		return fmt.Errorf("app: %w", err)
	}
	if err := history.Migrate(ctx, pool); err != nil {
		return fmt.Errorf("app: %w", err)
	}
	for _, t := range list {
		if t.SQLSchema == "" {
			continue
		}
		if _, err := pool.Exec(ctx, t.SQLSchema); err != nil {
			return fmt.Errorf("app: schema of task %s: %w", t.Config.Type, err)
		}
	}
	return nil
}
