package app

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/app/store"
	"github.com/jobguard/jobguard/internal/redact"
	"github.com/jobguard/jobguard/tasks"
)

// runMigrate is `jobguard migrate`: apply every pending schema step to DATABASE_URL and say which.
func runMigrate(ctx context.Context, lookup func(string) (string, bool), stdout, stderr io.Writer, list []tasks.Task) int {
	cfg, err := config.FromLookup(lookup, list)
	if err != nil {
		fmt.Fprintln(stderr, "jobguard migrate:", err)
		return 2
	}
	if cfg.DatabaseURL == "" {
		fmt.Fprintln(stderr, "jobguard migrate: DATABASE_URL is not set")
		return 2
	}
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		fmt.Fprintln(stderr, "jobguard migrate:", redact.Error(err))
		return 1
	}
	defer pool.Close()
	if err := store.MigrateUp(ctx, pool, cfg.Tasks, stdout); err != nil {
		fmt.Fprintln(stderr, "jobguard migrate:", redact.Error(err))
		return 1
	}
	fmt.Fprintln(stdout, "schema is current")
	return 0
}
