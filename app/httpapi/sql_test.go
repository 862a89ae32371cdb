package httpapi

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/app/store"
	"github.com/jobguard/jobguard/internal/pgtest"
	"github.com/jobguard/jobguard/internal/testsupport"
	"github.com/jobguard/jobguard/tasks/registry"
)

// With DATABASE_URL the reserve-stock example keeps its effect in PostgreSQL: the order is applied
// once, and GET /stock reads SQL.
func TestReserveStockInPostgres(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAll, map[string]string{"DATABASE_URL": pgtest.NewDB(t), "DATABASE_MIGRATE": "true"})
	body := `{"tenant_id":"t1","order_id":"o1","sku":"s1","quantity":4}`
	resp, answer := post(t, r, "/jobs/reserve-stock", body)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("enqueue: %d %s", resp.StatusCode, answer)
	}
	id := strings.Split(strings.Split(answer, `"job_id":"`)[1], `"`)[0]
	if v := waitJob(t, r, id, "done"); v.Result != "reserved_total=4" {
		t.Fatalf("job: %+v", v)
	}
	var s struct {
		Reserved      int64 `json:"reserved"`
		OrdersApplied int64 `json:"orders_applied"`
	}
	if code := getJSON(t, r, "/stock/t1/s1", &s); code != http.StatusOK || s.Reserved != 4 || s.OrdersApplied != 1 {
		t.Fatalf("stock: %d %+v", code, s)
	}
	var n int
	if err := r.API().deps.SQL.QueryRow(t.Context(), "SELECT count(*) FROM reserve_stock_orders").Scan(&n); err != nil || n != 1 {
		t.Fatalf("order rows: %d %v", n, err)
	}
}

// A DATABASE_URL that does not parse stops start-up naming the variable, without its password.
func TestDatabaseURLErrorsNameTheVariable(t *testing.T) {
	t.Parallel()
	cfg, err := config.FromLookup(lookupFrom(map[string]string{"DATABASE_URL": "postgres://u:hunter2@127.0.0.1:1/db?connect_timeout=1"}), registry.All())
	if err != nil {
		t.Fatal(err)
	}
	_, err = store.OpenSQL(t.Context(), cfg)
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("open: %v", err)
	}
}

// POST /orders records the order in SQL and its reserve-stock job in the outbox, in one
// transaction; the relay hands the job to the engine and it reserves once. The same order again
// is its job (200); the same order id with another quantity is 409.
func TestPlaceOrderThroughTheOutbox(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAll, map[string]string{"DATABASE_URL": pgtest.NewDB(t), "DATABASE_MIGRATE": "true"})
	body := `{"tenant_id":"t1","order_id":"o9","sku":"s9","quantity":2}`
	resp, answer := post(t, r, "/orders", body)
	if resp.StatusCode != http.StatusAccepted || resp.Header.Get("Location") == "" {
		t.Fatalf("place: %d %s", resp.StatusCode, answer)
	}
	id := strings.Split(strings.Split(answer, `"job_id":"`)[1], `"`)[0]
	if v := waitJob(t, r, id, "done"); v.Result != "reserved_total=2" {
		t.Fatalf("job: %+v", v)
	}
	if resp, again := post(t, r, "/orders", body); resp.StatusCode != http.StatusOK || !strings.Contains(again, id) {
		t.Fatalf("the same order again: %d %s", resp.StatusCode, again)
	}
	resp, conflict := post(t, r, "/orders", `{"tenant_id":"t1","order_id":"o9","sku":"s9","quantity":3}`)
	if p := decodeProblem(t, resp, conflict); p.Status != http.StatusConflict || p.Field != "order_id" {
		t.Fatalf("another quantity: %+v", p)
	}
	var n int
	if err := r.API().deps.SQL.QueryRow(t.Context(), "SELECT count(*) FROM jobguard_outbox").Scan(&n); err != nil || n != 0 {
		t.Fatalf("outbox rows left: %d %v", n, err)
	}
}

// Without DATABASE_URL there is nowhere to record an order: /orders is not a route, 404 for POST
// as for every method; with it, /orders is POST's (405 Allow POST to GET).
func TestPlaceOrderNeedsSQL(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, nil)
	resp, body := post(t, r, "/orders", `{"tenant_id":"t1","order_id":"o9","sku":"s9","quantity":2}`)
	if p := decodeProblem(t, resp, body); p.Status != http.StatusNotFound {
		t.Fatalf("%+v", p)
	}
	if resp, _ := get(t, r.base+"/orders"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /orders without DATABASE_URL: %d, want 404", resp.StatusCode)
	}
	withSQL := startApp(t, RoleAPI, map[string]string{"DATABASE_URL": pgtest.NewDB(t), "DATABASE_MIGRATE": "true"})
	if resp, _ := get(t, withSQL.base+"/orders"); resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Fatalf("GET /orders with DATABASE_URL: %d Allow %q, want 405 Allow POST", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

// With DATABASE_URL a finished job is copied to SQL; once Redis lets it go, GET /jobs/{id} reads
// the copy, with the same record and timeline.
func TestFinishedJobsHaveAHistoryInSQL(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAll, map[string]string{"DATABASE_URL": pgtest.NewDB(t), "DATABASE_MIGRATE": "true"})
	resp, answer := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"h1"}`)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("enqueue: %d %s", resp.StatusCode, answer)
	}
	id := strings.Split(strings.Split(answer, `"job_id":"`)[1], `"`)[0]
	live := waitJob(t, r, id, "done")
	testsupport.Eventually(t, 10*time.Second, "the job's copy", func() bool {
		var n int
		_ = r.API().deps.SQL.QueryRow(t.Context(), "SELECT count(*) FROM jobguard_job_history WHERE job_id = $1 AND status = 'done'", id).Scan(&n)
		return n == 1
	})
	// What the end of JOB_RETENTION does in Redis.
	keys := r.Redis().Keys(t.Context(), "jobguard:*:job:"+id+"*").Val()
	if len(keys) != 1 { // the record: a done happy path keeps no timeline list (folded)
		t.Fatalf("record keys %v", keys)
	}
	r.Redis().Del(t.Context(), keys...)
	var copied jobView
	if code := getJSON(t, r, "/jobs/"+id, &copied); code != http.StatusOK || copied.Status != "done" ||
		copied.Result != live.Result || len(copied.Timeline) != len(live.Timeline) || copied.Timeline[0].Event != "enqueued" {
		t.Fatalf("from SQL: %d %+v, live %+v", code, copied, live)
	}
}

// Without DATABASE_MIGRATE a process refuses to start on a database that lacks a schema step, naming
// the variable; `jobguard migrate` applies every step (and says which), after which it starts.
func TestMigrateCommand(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	env := map[string]string{"DATABASE_URL": url, "REDIS_URL": "redis://127.0.0.1:1/0"}
	cfg, err := config.FromLookup(lookupFrom(env), registry.All())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.OpenSQL(t.Context(), cfg); err == nil || !strings.Contains(err.Error(), "DATABASE_MIGRATE") {
		t.Fatalf("start on an empty database: %v", err)
	}
	var out, errs strings.Builder
	if code := runMain(t.Context(), []string{"migrate"}, lookupFrom(env), &out, &errs, registry.All()); code != 0 ||
		!strings.Contains(out.String(), "applied version 1 ") || !strings.Contains(out.String(), "applied version 101 ") {
		t.Fatalf("migrate: %d %q %q", code, out.String(), errs.String())
	}
	pool, err := store.OpenSQL(t.Context(), cfg)
	if err != nil {
		t.Fatalf("start after migrate: %v", err)
	}
	pool.Close()
	out.Reset()
	if code := runMain(t.Context(), []string{"migrate"}, lookupFrom(env), &out, &errs, registry.All()); code != 0 || strings.Contains(out.String(), "applied") {
		t.Fatalf("migrate again: %d %q", code, out.String())
	}
}
