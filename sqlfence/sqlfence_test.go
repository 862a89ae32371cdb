package sqlfence

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/internal/pgtest"
	"github.com/jobguard/jobguard/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var bg = context.Background()

func newPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.NewPool(t)
	if err := Migrate(bg, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(bg, "CREATE TABLE stock (sku text PRIMARY KEY, reserved int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return pool
}

func reserve(pool *pgxpool.Pool, f Fence, n int) error {
	return InTx(bg, pool, "sku-1", f, func(tx pgx.Tx) error {
		_, err := tx.Exec(bg, `INSERT INTO stock VALUES ('sku-1', $1) ON CONFLICT (sku) DO UPDATE SET reserved = stock.reserved + $1`, n)
		return err
	})
}

func reserved(t *testing.T, pool *pgxpool.Pool) int {
	var n int
	if err := pool.QueryRow(bg, "SELECT coalesce(sum(reserved), 0) FROM stock").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The Redis fence's rule, in SQL: a lower token, or the same token from another owner, writes
// nothing; the same token and owner again (a retry) and a higher token write.
func TestWriteRefusesStaleFences(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	steps := []struct {
		f     Fence
		stale bool
		total int
	}{
		{Fence{5, "a"}, false, 1},
		{Fence{5, "a"}, false, 2}, // the same run again
		{Fence{4, "z"}, true, 2},  // an older run
		{Fence{5, "b"}, true, 2},  // the same token, another owner
		{Fence{6, "c"}, false, 3},
		{Fence{5, "a"}, true, 3}, // the first run, after a newer one wrote
	}
	for i, s := range steps {
		err := reserve(pool, s.f, 1)
		var stale *StaleError
		if got := errors.As(err, &stale); got != s.stale || (err != nil && !s.stale) {
			t.Fatalf("step %d %+v: %v", i, s.f, err)
		}
		if s.stale && (!errors.Is(err, ErrStale) || stale.Current < s.f.Token) {
			t.Fatalf("step %d: %+v", i, stale)
		}
		if n := reserved(t, pool); n != s.total {
			t.Fatalf("step %d %+v: reserved %d, want %d", i, s.f, n, s.total)
		}
	}
}

// Two transactions of one resource serialise on the fence row: the lower token, committing after
// the higher, is refused, whatever order they started in.
func TestConcurrentWritersSerialise(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	// The newer writer takes the row first and holds it while the older one waits.
	newer, err := pool.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	if err := Write(bg, newer, "sku-1", Fence{8, "new"}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var olderErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		olderErr = reserve(pool, Fence{7, "old"}, 100)
	}()
	if _, err := newer.Exec(bg, `INSERT INTO stock VALUES ('sku-1', 1)`); err != nil {
		t.Fatal(err)
	}
	if err := newer.Commit(bg); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if !errors.Is(olderErr, ErrStale) || reserved(t, pool) != 1 {
		t.Fatalf("older writer: %v, reserved %d", olderErr, reserved(t, pool))
	}
}

// A fence is only ever a positive token with an owner.
func TestWriteNeedsAFence(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	for _, f := range []Fence{{0, "a"}, {-1, "a"}, {1, ""}} {
		if err := Write(bg, pool, "r", f); err == nil || errors.Is(err, ErrStale) {
			t.Errorf("%+v: %v", f, err)
		}
	}
}
