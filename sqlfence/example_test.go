package sqlfence_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/internal/pgtest"
	"github.com/jobguard/jobguard/sqlfence"
)

// A handler writes its effect in SQL under its lease's fence (in a handler: f := run.Fence(); sqlfence.Fence{Token: f.Token, Owner: f.Owner}).
// After a newer run has written, the older run's transaction changes nothing.
func Example() {
	ctx := context.Background()
	url, drop, err := pgtest.NewDatabase()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()
	pool, _ := pgxpool.New(ctx, url)
	defer pool.Close()
	_ = sqlfence.Migrate(ctx, pool)
	_, _ = pool.Exec(ctx, "CREATE TABLE cache (key text PRIMARY KEY, value text)")

	write := func(f sqlfence.Fence, value string) error {
		return sqlfence.InTx(ctx, pool, "tenant-1:report", f, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO cache VALUES ('report', $1) ON CONFLICT (key) DO UPDATE SET value = $1`, value)
			return err
		})
	}
	fmt.Println(write(sqlfence.Fence{Token: 2, Owner: "worker-b"}, "new"))
	err = write(sqlfence.Fence{Token: 1, Owner: "worker-a"}, "old")
	fmt.Println(errors.Is(err, sqlfence.ErrStale), err)
	var value string
	_ = pool.QueryRow(ctx, "SELECT value FROM cache").Scan(&value)
	fmt.Println(value)
	// Output:
	// <nil>
	// true sqlfence: token 1 is stale for tenant-1:report (current 2)
	// new
}
