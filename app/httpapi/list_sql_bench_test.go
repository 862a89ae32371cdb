package httpapi

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/app/store"
	"github.com/jobguard/jobguard/history"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/pgtest"
	"github.com/jobguard/jobguard/internal/redistest"
)

// BenchmarkListSQL50Of100k: a page of 50 read from the SQL history (the list past the end of an
// empty Redis index) of a tenant with 100,000 copies, beside another tenant's 100,000; pages
// spread over the whole history; reports p50 and p99 per page.
func BenchmarkListSQL50Of100k(b *testing.B) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.NewDB(b))
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	if err := store.MigrateUp(ctx, pool, nil, nil); err != nil {
		b.Fatal(err)
	}
	const n = 100_000
	base := time.Now().Add(-24 * time.Hour).UnixMilli()
	// Job ids of the real shape: 16 hex of tag, 12 of the creation ms, 16 of "random".
	if _, err := pool.Exec(ctx, `
		INSERT INTO jobguard_job_history (job_id, tenant, type, status, finished_at, record, timeline, created_at)
		SELECT id, tenant, 'typ', 'done', now(), jsonb_build_object('job_id', id, 'type', 'typ', 'queue', 'default',
			'tenant', tenant, 'status', 'done', 'attempt', '1', 'created_at', ms::text, 'updated_at', ms::text,
			'finished_at', ms::text), '[]', timestamptz 'epoch' + ms * interval '1 millisecond'
		FROM (SELECT lpad(to_hex(i), 16, '0') || '-' || lpad(to_hex($1::bigint + i), 12, '0') || lpad(to_hex(t), 16, '0') AS id,
			't' || t AS tenant, $1::bigint + i AS ms FROM generate_series(0, $2 - 1) i, generate_series(1, 2) t) s`, base, n); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE jobguard_job_history"); err != nil {
		b.Fatal(err)
	}
	rdb := redistest.NewDB(b).Client
	stack := engine.New(rdb, engine.Config{WorkerID: "bench"})
	defer stack.Close()
	var ids []string
	if err := pool.QueryRow(ctx, `SELECT array_agg(job_id ORDER BY created_at DESC, job_id DESC) FROM jobguard_job_history WHERE tenant = 't1'`).Scan(&ids); err != nil {
		b.Fatal(err)
	}
	cursors := []string{""}
	for i := 997; i < n-50; i += 997 {
		cursors = append(cursors, "sql."+jobstore.EncodeCursor(jobstore.CreatedMS(ids[i]), ids[i]))
	}
	var took []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		p, err := history.List(ctx, pool, stack, engine.ListQuery{Tenant: "t1", Limit: 50, Cursor: cursors[i%len(cursors)]})
		took = append(took, time.Since(t0))
		if err != nil || len(p.Jobs) != 50 || p.Jobs[0].Tenant != "t1" {
			b.Fatalf("page: %d jobs, %v", len(p.Jobs), err)
		}
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
}
