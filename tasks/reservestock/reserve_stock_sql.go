package reservestock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/middleware"
	"github.com/jobguard/jobguard/outbox"
	"github.com/jobguard/jobguard/sqlfence"
	"github.com/jobguard/jobguard/tasks"
)

// reserve-stock's store when DATABASE_URL is set: the SKU's totals and the applied orders live in
// PostgreSQL and commit in one transaction fenced by the run's token (sqlfence). The order row is
// keyed by (tenant, order id), so a crash between the SQL commit and the Redis finish ends as
// already_applied on the next run, never as a second reservation.

var (
	//go:embed sql/reserve_stock_schema.sql
	reserveStockSchema string
	//go:embed sql/reserve_stock_apply.sql
	reserveStockApply string
	//go:embed sql/reserve_stock_total.sql
	reserveStockTotal string
	//go:embed sql/reserve_stock_read.sql
	reserveStockRead string
	//go:embed sql/reserve_stock_place.sql
	reserveStockPlace string
	//go:embed sql/reserve_stock_placed.sql
	reserveStockPlaced string
)

// errOrderApplied: the order has a row already; nothing changes.
var errOrderApplied = errors.New("tasks: order applied before")

// fenceResource is the SQL fence's resource of a SKU: the same resource the lease protects.
func fenceResource(p ReserveStockPayload) string {
	return tasks.SQLFenceResource(TypeReserveStock, p.Resource())
}

// applySQL reserves the order's quantity in one fenced transaction and returns the new total;
// engine.ErrAlreadyApplied when the order was applied before, a *sqlfence.StaleError when a newer
// run owns the SKU (nothing written either way).
func applySQL(ctx context.Context, db *pgxpool.Pool, job *middleware.Run, p ReserveStockPayload) (int64, error) {
	f := sqlfence.Fence{Token: job.Fence().Token, Owner: job.Fence().Owner}
	var total int64
	var stale *sqlfence.StaleError
	err := sqlfence.InTx(ctx, db, fenceResource(p), f, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, reserveStockApply, p.TenantID, p.OrderID, p.SKU, p.Quantity, job.JobID(), f.Token)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return errOrderApplied
		}
		return tx.QueryRow(ctx, reserveStockTotal, p.TenantID, p.SKU, p.Quantity, f.Token).Scan(&total)
	})
	switch {
	case errors.Is(err, errOrderApplied):
		return 0, fmt.Errorf("%w: order %s", middleware.ErrAlreadyApplied, p.OrderID)
	case errors.As(err, &stale):
		// A newer run wrote the SKU in SQL, or Redis's fence counter was lost (a failover) and
		// restarted below what SQL has seen: lift it above, so the next run's token can write.
		// Nothing was written by this run either way.
		if _, rerr := job.Locks().RaiseFence(ctx, job.Lease().Resource, stale.Current); rerr != nil {
			return 0, errors.Join(err, rerr)
		}
		return 0, err
	case err != nil:
		return 0, fmt.Errorf("reserve stock in SQL: %w", err)
	}
	return total, nil
}

// readStockSQL is GET /stock/{tenant}/{sku} from PostgreSQL.
func readStockSQL(ctx context.Context, db *pgxpool.Pool, tenant, sku string) (Stock, error) {
	s := Stock{TenantID: tenant, SKU: sku}
	err := db.QueryRow(ctx, reserveStockRead, tenant, sku).Scan(&s.Reserved, &s.OrdersApplied, &s.FencingToken)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return Stock{}, fmt.Errorf("read stock: %w", err)
	}
	return s, nil
}

// placeOrder is POST /orders: the order is recorded in SQL and its reserve-stock job in the outbox,
// in one transaction, so the job exists if and only if the order does. The same order again
// answers its job (200); the same order id with another sku or quantity is a conflict (409).
func placeOrder(ctx context.Context, r tasks.ReadDeps, req tasks.Request) (tasks.Answer, error) {
	if r.SQL == nil {
		return tasks.Answer{}, tasks.NotFound("orders are recorded in PostgreSQL: this process has no DATABASE_URL")
	}
	p := *req.(*ReserveStockPayload)
	spec := p.Spec()
	// The order row is the order's identity here: a dedup marker could collapse the relayed job
	// onto another job of the order and leave this answer's job id without a job.
	spec.Dedup = nil
	spec.JobID = engine.NewJobID(spec.Resource, time.Now())
	ans := tasks.Answer{Status: http.StatusAccepted}
	err := pgx.BeginFunc(ctx, r.SQL, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, reserveStockPlace, p.TenantID, p.OrderID, p.SKU, p.Quantity, spec.JobID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			var sku, job string
			var qty int
			if err := tx.QueryRow(ctx, reserveStockPlaced, p.TenantID, p.OrderID).Scan(&sku, &qty, &job); err != nil {
				return err
			}
			if sku != p.SKU || qty != p.Quantity {
				return tasks.Conflict("order_id", "order "+p.OrderID+" was placed with another sku or quantity")
			}
			spec.JobID, ans.Status = job, http.StatusOK
			return nil
		}
		_, err = outbox.EnqueueTx(ctx, tx, spec)
		return err
	})
	if err != nil {
		var conflict *tasks.ConflictError
		if errors.As(err, &conflict) {
			return tasks.Answer{}, err
		}
		return tasks.Answer{}, fmt.Errorf("place order: %w", err)
	}
	ans.Body = tasks.QueuedJob{JobID: spec.JobID, Status: "queued", Deduplicated: ans.Status == http.StatusOK}
	ans.Location = "/jobs/" + spec.JobID
	return ans, nil
}
