package httpapi

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/pgtest"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// GET /jobs's search text reaches PostgreSQL with DATABASE_URL: a NUL or invalid UTF-8 in error=
// (or type=) must be refused as 400 naming the parameter, not a 500 from the database.
func TestReview2SearchTextWithNULOrBadUTF8Is400(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": pgtest.NewDB(t), "DATABASE_MIGRATE": "true", "REDIS_URL": redistest.NewDB(t).URL()}
	for k, v := range twoTenants {
		env[k] = v
	}
	r := startApp(t, RoleAll, env)
	for _, c := range []struct{ param, value string }{
		{"error", "a\x00b"}, {"error", "\xff\xfe"}, {"type", "a\x00b"}, {"type", "\xff"},
	} {
		resp, body := get(t, r.base+"/jobs?"+c.param+"="+url.QueryEscape(c.value), bearer(tokenA)...)
		if resp.StatusCode != 400 {
			t.Errorf("%s=%q: %d %s, want 400", c.param, c.value, resp.StatusCode, body)
			continue
		}
		if p := decodeProblem(t, resp, body); p.Field != c.param {
			t.Errorf("%s=%q: field %q", c.param, c.value, p.Field)
		}
	}
}

// A schedule of an ENCRYPT_TYPES type: its payload is the payload of every job it enqueues, kept
// encrypted in the job records; the copy the scheduler publishes in Redis for GET /schedules on
// other processes must not hold it in plaintext.
func TestReview2PublishedScheduleOfAnEncryptedTypeHoldsNoPlaintextPayload(t *testing.T) {
	t.Parallel()
	url := redistest.NewDB(t).URL()
	worker := startApp(t, RoleWorker, map[string]string{"REDIS_URL": url, "LEASE_TTL": "2s",
		"ENCRYPT_TYPES": "reserve-stock", "ENCRYPTION_KEYS": "a:" + newKey(t),
		"SCHEDULES": `[{"name":"nightly","spec":"@every 1h","type":"reserve-stock","payload":{"tenant_id":"t1","order_id":"o1","sku":"secret-sku-77","quantity":7}}]`})
	var keys []string
	testsupport.Eventually(t, 5*time.Second, "a published schedule", func() bool {
		keys = worker.Redis().Keys(context.Background(), "*schedules}:published:*").Val()
		return len(keys) > 0
	})
	for _, k := range keys {
		if v := worker.Redis().Get(context.Background(), k).Val(); strings.Contains(v, "secret-sku-77") {
			t.Errorf("published %s holds the encrypted type's payload in plaintext: %s", k, v)
		}
	}
}

// GET /jobs continued into the SQL history with a filter that matches little (error text, status,
// type, tags) reads a bounded number of rows per request and answers a cursor to go on, as the
// Redis index's pages do; it read every row of the tenant's history on each request (300,000 rows:
// 290 ms with error=, holding a pool connection; a tenant at its rate limit starves the pool).
func TestReview2SQLSearchReadsBoundedRowsPerPage(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDB(t)
	env := map[string]string{"DATABASE_URL": dbURL, "DATABASE_MIGRATE": "true", "REDIS_URL": redistest.NewDB(t).URL()}
	for k, v := range twoTenants {
		env[k] = v
	}
	r := startApp(t, RoleAPI, env)
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	const rows = 3000
	base := time.Now().Add(-24 * time.Hour).Truncate(time.Millisecond)
	ids := make([]string, rows)
	errs := make([]string, rows)
	for i := range rows {
		ids[i] = jobstore.NewJobID("r", base.Add(time.Duration(i)*time.Millisecond))
		errs[i] = "timeout"
	}
	errs[0] = "the NEEDLE broke" // the oldest row matches
	if _, err := pool.Exec(context.Background(), `INSERT INTO jobguard_job_history (job_id, tenant, type, status, finished_at, record, timeline, created_at)
SELECT id, 't1', 'rebuild-cache', 'failed', now(), jsonb_build_object('job_id', id, 'tenant', 't1', 'type', 'rebuild-cache', 'status', 'failed', 'last_error', e),
  '[]'::jsonb, timestamptz 'epoch' + ('x' || lpad(substr(id, 18, 12), 16, '0'))::bit(64)::bigint * interval '1 millisecond'
FROM unnest($1::text[], $2::text[]) AS u(id, e)`, ids, errs); err != nil {
		t.Fatal(err)
	}
	var found []string
	cursor, pages := "", 0
	for ; pages < 100; pages++ {
		q := "/jobs?error=needle&limit=10"
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		var p listView
		if code := getJSON(t, r, q, &p, bearer(tokenA)...); code != 200 {
			t.Fatalf("%s: %d", q, code)
		}
		if pages == 0 && p.NextCursor == "" {
			t.Fatalf("the first page read all %d rows of the history: %+v, want a bounded read and a cursor", rows, p)
		}
		for _, j := range p.Jobs {
			found = append(found, j.JobID)
		}
		if cursor = p.NextCursor; cursor == "" {
			break
		}
	}
	if len(found) != 1 || found[0] != ids[0] || pages < 2 {
		t.Fatalf("found %v in %d pages, want [%s] over several", found, pages+1, ids[0])
	}
}
