package reservestock

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/pgtest"
	"github.com/jobguard/jobguard/sqlfence"
	"github.com/jobguard/jobguard/tasks"
)

// sqlDeps is a PostgreSQL database with the fence table and reserve-stock's schema.
func sqlDeps(t *testing.T) tasks.Deps {
	t.Helper()
	pool, err := pgxpool.New(bg, pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := sqlfence.Migrate(bg, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(bg, reserveStockSchema); err != nil {
		t.Fatal(err)
	}
	return tasks.Deps{SQL: pool}
}

// With DATABASE_URL, an order is applied once per (tenant, order id) in SQL: a second job for the
// same order (its Redis dedup and applied record gone, as after a crash between the SQL commit and
// the Redis finish) ends already_applied and reserves nothing; the read model reads SQL.
func TestReserveStockInSQLAppliesOnce(t *testing.T) {
	t.Parallel()
	deps := sqlDeps(t)
	e := start(t, deps)
	order := ReserveStockPayload{TenantID: "t1", OrderID: "o1", SKU: "s1", Quantity: 3}
	first := e.Wait(e.Enqueue(order.Spec()), "done")
	if first.Raw["result"] != "reserved_total=3" {
		t.Fatalf("first: %v", first.Raw)
	}
	// What a crash after the SQL commit leaves: no Redis trace of the order having been applied.
	spec := order.Spec()
	spec.Dedup, spec.OpKey = nil, ""
	again := e.Wait(e.Enqueue(spec), "done")
	if again.Raw["result"] != "already_applied" {
		t.Fatalf("second run of the order: %v", again.Raw)
	}
	s, err := readStockSQL(bg, deps.SQL, "t1", "s1")
	if err != nil || s.Reserved != 3 || s.OrdersApplied != 1 || s.FencingToken < 1 {
		t.Fatalf("stock %+v %v", s, err)
	}
	var rows int
	if err := deps.SQL.QueryRow(bg, "SELECT count(*) FROM reserve_stock_orders WHERE tenant = 't1' AND order_id = 'o1'").Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("order rows %d %v", rows, err)
	}
}

// A run whose token is below what SQL has seen for the SKU (Redis's fence counter lost and
// restarted) writes nothing there, and lifts Redis's counter: the job's next run writes, once.
func TestReserveStockInSQLRecoversFromALostCounter(t *testing.T) {
	t.Parallel()
	deps := sqlDeps(t)
	p := ReserveStockPayload{TenantID: "t1", OrderID: "o2", SKU: "s1", Quantity: 1}
	if err := sqlfence.Write(bg, deps.SQL, fenceResource(p), sqlfence.Fence{Token: 9, Owner: "before-the-failover"}); err != nil {
		t.Fatal(err)
	}
	e := start(t, deps)
	v := e.Wait(e.Enqueue(p.Spec()), "done")
	s, err := readStockSQL(bg, deps.SQL, "t1", "s1")
	if err != nil || s.Reserved != 1 || s.FencingToken <= 9 || v.Raw["attempt"] != "2" {
		t.Fatalf("stock %+v %v, job %v", s, err, v.Raw)
	}
	if !strings.Contains(strings.Join(timeline(v), " "), "retry_scheduled") {
		t.Fatalf("the refused first run is not on the timeline: %v", timeline(v))
	}
}

func timeline(v engine.View) []string {
	var out []string
	for _, e := range v.Timeline {
		out = append(out, e.Event+":"+e.Detail)
	}
	return out
}
