package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/internal/redact"
)

// sqlPingTimeout bounds the start-up check that PostgreSQL answers.
const sqlPingTimeout = 5 * time.Second

// OpenSQL returns the process's PostgreSQL pool when DATABASE_URL is set (nil otherwise), with
// the schema migrated (DATABASE_MIGRATE) or checked to be current. One pool per process: every handler may hold
// a connection for its transaction while the API's read models use the rest.
func OpenSQL(ctx context.Context, cfg config.Config) (*pgxpool.Pool, error) {
	if cfg.DatabaseURL == "" {
		return nil, nil
	}
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, &config.Error{Var: "DATABASE_URL", Err: redact.Error(err)}
	}
	// A connection per handler, plus the relay's listener and pass, the history writer and the
	// API's read models.
	pc.MaxConns = int32(cfg.WorkerConcurrency + 8)
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
	if cfg.DatabaseMigrate {
		err = MigrateUp(pctx, pool, cfg.Tasks, nil)
	} else {
		err = CheckSchema(pctx, pool, cfg.Tasks)
	}
	if err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}
