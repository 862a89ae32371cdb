package store

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/pgtest"
)

// A history row copied before the list's schema step gets its created_at from its job id (the
// Redis index's score), so a list continues into it in the index's order.
func TestHistoryListStepBackfillsCreatedAt(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(t.Context(), pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	p, done, err := schema(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	if _, err := p.UpTo(t.Context(), versionHistory); err != nil {
		t.Fatal(err)
	}
	at := time.UnixMilli(1764782000123)
	id := jobstore.NewJobID("r1", at)
	if _, err := pool.Exec(t.Context(), `INSERT INTO jobguard_job_history (job_id, tenant, type, status, record, timeline)
		VALUES ($1, 't1', 'x', 'done', '{}', '[]')`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(t.Context()); err != nil {
		t.Fatal(err)
	}
	var got time.Time
	if err := pool.QueryRow(t.Context(), `SELECT created_at FROM jobguard_job_history WHERE job_id = $1`, id).Scan(&got); err != nil || !got.Equal(at) {
		t.Fatalf("created_at %v (%v), want %v", got, err, at)
	}
}

// A history row copied before the search step gets its tags from its record, and the GIN index
// serves tags && and @>.
func TestHistorySearchStepBackfillsTags(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(t.Context(), pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	p, done, err := schema(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	if _, err := p.UpTo(t.Context(), versionHistoryList); err != nil {
		t.Fatal(err)
	}
	tagged, plain := jobstore.NewJobID("r1", time.UnixMilli(1764782000123)), jobstore.NewJobID("r2", time.UnixMilli(1764782000124))
	for id, rec := range map[string]string{tagged: `{"tags":"eu,nightly"}`, plain: `{}`} {
		if _, err := pool.Exec(t.Context(), `INSERT INTO jobguard_job_history (job_id, tenant, type, status, record, timeline, created_at)
			VALUES ($1, 't1', 'x', 'done', $2, '[]', now())`, id, rec); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Up(t.Context()); err != nil {
		t.Fatal(err)
	}
	var tags []string
	if err := pool.QueryRow(t.Context(), `SELECT tags FROM jobguard_job_history WHERE job_id = $1`, tagged).Scan(&tags); err != nil ||
		len(tags) != 2 || tags[0] != "eu" || tags[1] != "nightly" {
		t.Fatalf("backfilled tags %v (%v)", tags, err)
	}
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM jobguard_job_history WHERE tags @> $1::text[]`, []string{"nightly"}).Scan(&n); err != nil || n != 1 {
		t.Fatalf("tags @> nightly: %d (%v)", n, err)
	}
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM jobguard_job_history WHERE tags = '{}'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("untagged rows: %d (%v)", n, err)
	}
}
