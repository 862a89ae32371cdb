package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/faultproxy"
	"github.com/jobguard/jobguard/internal/pgtest"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/outbox"
	"github.com/jobguard/jobguard/tasks/reservestock"
)

// pgRun is the PostgreSQL mode's part of a run: the server it restarts, the test's own pool, and
// what it did there.
type pgRun struct {
	*run
	pg *pgtest.Server
	db *pgxpool.Pool

	pgRestarts, relayKills atomic.Int64
	rbMu                   sync.Mutex
	rolledBack             map[string]string // job id -> "tenant/order id" of a transaction rolled back
	jobOf                  sync.Map          // "tenant/order id" -> job id the API answered
}

// restartPostgres stops PostgreSQL as a crash would (an immediate shutdown: connections dropped,
// recovery at the start) and starts it again 1 s later.
func (p *pgRun) restartPostgres() {
	if err := p.pg.Restart(time.Second); err != nil {
		p.t.Errorf("postgres restart: %v", err)
	}
	p.pgRestarts.Add(1)
}

// relayLeader is the worker holding the outbox relay's leader lease (owner "<host>-<pid>:<random>"),
// waiting up to 20 s for one; take removes it from the pool.
func (p *pgRun) relayLeader() *proc {
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		owner := p.rdb.Get(context.Background(), "jobguard:{outbox-relay}:lock").Val() // locking's key of lease "outbox-relay"
		i := strings.LastIndex(owner, ":")
		if i < 0 {
			continue
		}
		pid, err := strconv.Atoi(owner[strings.LastIndex(owner[:i], "-")+1 : i])
		if err != nil {
			continue
		}
		p.mu.Lock()
		for j, w := range p.workers {
			if w.cmd.Process.Pid == pid {
				p.workers = append(p.workers[:j], p.workers[j+1:]...)
				p.mu.Unlock()
				return w
			}
		}
		p.mu.Unlock()
	}
	return nil
}

// killRelay kills (-9) the worker that relays the outbox while orders flow, and starts another.
func (p *pgRun) killRelay() {
	w := p.relayLeader()
	if w == nil {
		p.t.Error("no worker held the outbox relay's lease within 20 s")
		return
	}
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	p.relayKills.Add(1)
	p.startWorker()
}

// rollBack records an order and its job in a transaction, as POST /orders does, and rolls it
// back: neither the order nor its job may ever exist.
func (p *pgRun) rollBack(i int) {
	o := reservestock.ReserveStockPayload{TenantID: fmt.Sprint("t", i%3+1), OrderID: fmt.Sprint("rb-", i), SKU: fmt.Sprint("sku-", rand.IntN(5)), Quantity: 1}
	spec := o.Spec()
	spec.Dedup = nil
	spec.JobID = engine.NewJobID(spec.Resource, time.Now())
	p.rbMu.Lock()
	p.rolledBack[spec.JobID] = o.TenantID + "/" + o.OrderID
	p.rbMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tx, err := p.db.Begin(ctx)
	if err != nil {
		return // PostgreSQL is down: nothing was recorded
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `INSERT INTO reserve_stock_requests (tenant, order_id, sku, quantity, job_id) VALUES ($1, $2, $3, $4, $5)`,
		o.TenantID, o.OrderID, o.SKU, o.Quantity, spec.JobID); err != nil {
		return
	}
	if _, err := outbox.EnqueueTx(ctx, tx, spec); err != nil {
		return
	}
	// Let the relay run a pass or two while the row is written but uncommitted.
	time.Sleep(time.Duration(rand.IntN(200)) * time.Millisecond)
}

// TestChaosPostgres is the chaos suite with DATABASE_URL: reserve-stock keeps its effect in
// PostgreSQL, orders come through POST /orders (the outbox) and POST /jobs/reserve-stock, and
// the test rolls back transactions that recorded an order and its job. Besides the suite's
// faults (kill -9, SIGSTOP past the lease, latency then a partition, a Redis restart, SIGTERM)
// it restarts PostgreSQL and kills the outbox relay's leader twice. CHAOS=postgres (make chaos).
func TestChaosPostgres(t *testing.T) {
	if os.Getenv("CHAOS") != "postgres" {
		t.Skip("set CHAOS=postgres (make chaos)")
	}
	const duration = 60 * time.Second
	wall := time.Now()
	bin := buildJobguard(t)
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	px, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	pg := pgtest.StartServer(t)
	dbURL := pg.URL("postgres")
	migrate := exec.Command(bin, "migrate")
	migrate.Env = []string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + dbURL}
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("jobguard migrate: %v\n%s", err, out)
	}
	db, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var upCalls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
		fmt.Fprintf(w, "v%d", upCalls.Add(1))
	}))
	defer up.Close()
	r := newRun(&run{t: t, bin: bin, redis: srv, rdb: srv.Client(t, 0), proxy: px, up: up, env: []string{"DATABASE_URL=" + dbURL}})
	p := &pgRun{run: r, pg: pg, db: db, rolledBack: map[string]string{}}
	r.api = r.start("api", srv.Addr)
	for i := 0; i < 3; i++ {
		r.startWorker()
	}

	// One cycle of faults spread over the load, each once (the relay's leader twice).
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		cycle := []func(){r.kill, p.restartPostgres, r.pause, p.killRelay, r.network, r.restartRedis, r.sigterm, p.killRelay}
		step := (duration - 30*time.Second) / time.Duration(len(cycle)+1)
		for _, fault := range cycle {
			time.Sleep(step)
			fault()
		}
	}()

	// Workload: orders through POST /orders (p-) and POST /jobs/reserve-stock (j-), a third of them
	// submitted again, and every fifth step a transaction that records an order and rolls back.
	nOrders := int(duration / (100 * time.Millisecond))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	deadline := time.Now().Add(duration)
	for i := 0; i < nOrders && time.Now().Before(deadline); i++ {
		o := order{tenant: fmt.Sprint("t", i%3+1), sku: fmt.Sprint("sku-", rand.IntN(5)), qty: rand.IntN(5) + 1}
		path, id, key := "/orders", fmt.Sprint("p-", i), ""
		if i%2 == 1 {
			path, id = "/jobs/reserve-stock", fmt.Sprint("j-", i)
			if i%4 == 1 {
				key = "k-" + id
			}
		}
		body := fmt.Sprintf(`{"tenant_id":%q,"order_id":%q,"sku":%q,"quantity":%d}`, o.tenant, id, o.sku, o.qty)
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if jobID, code := r.submit(path, body, key); code >= 200 && code < 300 {
				r.orders.Store(o.tenant+"/"+id, o)
				p.jobOf.Store(o.tenant+"/"+id, jobID)
			}
			r.submissions.Add(1)
			if i%3 == 0 {
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Millisecond)
				r.submit(path, body, key)
				r.submissions.Add(1)
				r.duplicates.Add(1)
			}
			if i%5 == 0 {
				p.rollBack(i)
			}
		}()
		if i%20 == 0 {
			r.rebuildBurst()
		}
		time.Sleep(time.Until(wall.Add(time.Duration(i+1) * duration / time.Duration(nOrders))))
	}
	wg.Wait()
	<-faultsDone

	// Quiescence: the outbox is empty and every job in Redis has ended.
	for quiet := time.Now().Add(3 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		open := 0
		for _, f := range r.jobRecords("status") {
			if s, _ := f[0].(string); !isEnded(s) {
				open++
			}
		}
		var rows int
		_ = db.QueryRow(context.Background(), `SELECT count(*) FROM jobguard_outbox`).Scan(&rows)
		if open == 0 && rows == 0 {
			break
		}
		if time.Now().After(quiet) {
			t.Errorf("invariant: %d jobs not ended and %d outbox rows left 3 minutes after the workload", open, rows)
			break
		}
	}
	p.check(time.Since(wall))
}

// check verifies the PostgreSQL mode's invariants and prints its figures.
func (p *pgRun) check(wall time.Duration) {
	t, ctx := p.t, context.Background()
	type row struct {
		sku   string
		qty   int
		jobID string
	}
	readRows := func(table string) map[string]row {
		out := map[string]row{}
		rows, err := p.db.Query(ctx, `SELECT tenant, order_id, sku, quantity, job_id FROM `+table)
		if err != nil {
			t.Fatalf("read %s: %v", table, err)
		}
		defer rows.Close()
		for rows.Next() {
			var tenant, id string
			var r row
			if err := rows.Scan(&tenant, &id, &r.sku, &r.qty, &r.jobID); err != nil {
				t.Fatal(err)
			}
			out[tenant+"/"+id] = r
		}
		return out
	}
	requests, applied := readRows("reserve_stock_requests"), readRows("reserve_stock_orders")

	// The committed orders: those POST /orders recorded (the SQL row is the truth: a client that
	// gave up may still have committed one) and those POST /jobs/reserve-stock accepted.
	committed := map[string]order{}
	for k, rq := range requests {
		committed[k] = order{tenant: strings.Split(k, "/")[0], sku: rq.sku, qty: rq.qty}
	}
	notRecorded := 0
	p.orders.Range(func(k, v any) bool {
		o := v.(order)
		if strings.Contains(k.(string), "/p-") {
			if rq, ok := requests[k.(string)]; !ok || rq.sku != o.sku || rq.qty != o.qty {
				notRecorded++
			}
		} else {
			committed[k.(string)] = o
		}
		return true
	})
	if notRecorded > 0 {
		t.Errorf("invariant: %d orders POST /orders accepted have no (or another) order row", notRecorded)
	}

	// SQL totals equal the sum over distinct orders; each applied once, as committed.
	want, wantOrders := map[string]int64{}, map[string]int64{}
	notApplied, appliedOther := 0, 0
	for k, o := range committed {
		want[o.tenant+":"+o.sku] += int64(o.qty)
		wantOrders[o.tenant+":"+o.sku]++
		if a, ok := applied[k]; !ok || a.sku != o.sku || a.qty != o.qty {
			notApplied++
			p.explainNotApplied(k, o, requests[k].jobID, a)
		}
	}
	for k := range applied {
		if _, ok := committed[k]; !ok {
			appliedOther++
		}
	}
	doubles := int64(0)
	rows, err := p.db.Query(ctx, `SELECT tenant, sku, reserved, orders FROM reserve_stock`)
	if err != nil {
		t.Fatal(err)
	}
	got, gotOrders := map[string]int64{}, map[string]int64{}
	for rows.Next() {
		var tenant, sku string
		var reserved, n int64
		if err := rows.Scan(&tenant, &sku, &reserved, &n); err != nil {
			t.Fatal(err)
		}
		got[tenant+":"+sku], gotOrders[tenant+":"+sku] = reserved, n
	}
	rows.Close()
	for res := range merge(want, got) {
		if got[res] != want[res] || gotOrders[res] != wantOrders[res] {
			t.Errorf("invariant: SQL %s reserved %d for %d orders, want %d for %d distinct orders", res, got[res], gotOrders[res], want[res], wantOrders[res])
		}
		doubles += max(0, gotOrders[res]-wantOrders[res])
	}
	if notApplied > 0 {
		t.Errorf("invariant: %d committed orders not applied (or applied with another sku or quantity)", notApplied)
	}
	if appliedOther > 0 {
		t.Errorf("invariant: %d orders applied that were never committed", appliedOther)
	}
	if doubles > 0 {
		t.Errorf("invariant: %d double applications", doubles)
	}

	// Every committed order has its job, ended; every accepted job exists and ended.
	recs := p.jobRecords("status")
	withoutJob := 0
	for k, rq := range requests {
		if f, ok := recs[rq.jobID]; !ok || !isEnded(fmt.Sprint(f[0])) {
			withoutJob++
			t.Errorf("invariant: order %s is committed and its job %s does not exist or has not ended", k, rq.jobID)
		}
	}
	lost, failed := 0, 0
	p.accepted.Range(func(k, _ any) bool {
		switch f, ok := recs[k.(string)]; {
		case !ok || !isEnded(fmt.Sprint(f[0])):
			lost++
		case f[0] == "failed":
			failed++
		}
		return true
	})
	if lost > 0 {
		t.Errorf("invariant: %d accepted jobs lost or stuck", lost)
	}

	// No job, order row or history row for a rolled-back transaction.
	p.rbMu.Lock()
	var rbJobs []string
	rbOrders := map[string]bool{}
	for id, o := range p.rolledBack {
		rbJobs = append(rbJobs, id)
		rbOrders[o] = true
	}
	p.rbMu.Unlock()
	rbFound := 0
	for _, id := range rbJobs {
		if _, ok := recs[id]; ok {
			rbFound++
		}
	}
	var inHistory int
	if err := p.db.QueryRow(ctx, `SELECT count(*) FROM jobguard_job_history WHERE job_id = ANY($1)`, rbJobs).Scan(&inHistory); err != nil {
		t.Fatal(err)
	}
	rbFound += inHistory
	for k := range rbOrders {
		if _, ok := requests[k]; ok {
			rbFound++
		}
		if _, ok := applied[k]; ok {
			rbFound++
		}
	}
	if rbFound > 0 {
		t.Errorf("invariant: %d jobs, history rows or order rows of rolled-back transactions", rbFound)
	}

	var history int
	_ = p.db.QueryRow(ctx, `SELECT count(*) FROM jobguard_job_history`).Scan(&history)
	stale, rescued := 0, 0
	iter := p.rdb.Scan(ctx, 0, "jobguard:*:timeline", 1000).Iterator()
	for iter.Next(ctx) {
		for _, e := range p.rdb.LRange(ctx, iter.Val(), 0, -1).Val() {
			stale += strings.Count(e, `"stale_write_rejected"`)
			rescued += strings.Count(e, `"rescued"`)
		}
	}
	fmt.Printf(`
chaos figures (postgres)
| jobs accepted | %d |
| orders committed: POST /orders / POST /jobs/reserve-stock | %d / %d |
| duplicate submissions | %d of %d |
| transactions rolled back (an order and its job recorded) | %d |
| worker kills (kill -9) / pauses / SIGTERMs | %d / %d / %d |
| Redis restarts / network faults | %d / %d |
| PostgreSQL restarts / outbox relay leader kills (-9) | %d / %d |
| jobs failed (dead letter) | %d |
| stale writes rejected / rescues | %d / %d |
| committed orders not applied / applied twice / applied never committed | %d / %d / %d |
| committed orders without a job / lost jobs | %d / %d |
| jobs, rows of rolled-back transactions | %d |
| history rows (finished jobs copied) / jobs in Redis | %d / %d |
| wall time | %s |
`, countOrders(&p.accepted), len(requests), len(committed)-len(requests), p.duplicates.Load(), p.submissions.Load(), len(rbJobs),
		p.kills.Load(), p.pauses.Load(), p.sigterms.Load(), p.restarts.Load(), p.netFaults.Load(),
		p.pgRestarts.Load(), p.relayKills.Load(), failed, stale, rescued,
		notApplied, doubles, appliedOther, withoutJob, lost, rbFound, history, len(recs), wall.Round(time.Second))
}

// explainNotApplied logs what became of a committed order that SQL does not show as applied: its
// job's record and timeline, so that a failure names its cause.
func (p *pgRun) explainNotApplied(key string, o order, jobID string, a any) {
	if jobID == "" {
		if v, ok := p.jobOf.Load(key); ok {
			jobID = v.(string)
		}
	}
	ctx := context.Background()
	var rec map[string]string
	var timeline []string
	for _, k := range scanKeys(p.rdb, "jobguard:*:job:"+jobID) {
		rec = p.rdb.HGetAll(ctx, k).Val()
		evs, _ := engine.ReadTimeline(ctx, p.rdb, k)
		for _, e := range evs {
			timeline = append(timeline, fmt.Sprintf("%+v", e))
		}
	}
	p.t.Logf("not applied: order %s (sku %s qty %d), applied row %+v, job %q\n  record %v\n  timeline %s",
		key, o.sku, o.qty, a, jobID, rec, strings.Join(timeline, "\n    "))
}

// merge is the set of keys of a and b.
func merge(a, b map[string]int64) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}
