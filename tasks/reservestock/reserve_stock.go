// Package reservestock is the example task reserve-stock: a quantity of a SKU reserved for an
// order exactly once per (tenant, order), in Redis or, with DATABASE_URL, in PostgreSQL under
// sqlfence. It imports the task contract (tasks) and the library, nothing of the app.
package reservestock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/locking"
	"github.com/jobguard/jobguard/middleware"
	"github.com/jobguard/jobguard/tasks"
)

// TypeReserveStock reserves a quantity of a SKU for an order, exactly once per (tenant, order).
const TypeReserveStock = "reserve-stock"

// ReserveStockPayload is the job's payload.
type ReserveStockPayload struct {
	TenantID string `json:"tenant_id" openapi:"ref=ID"`
	OrderID  string `json:"order_id" openapi:"ref=ID"`
	SKU      string `json:"sku" openapi:"ref=ID"`
	Quantity int    `json:"quantity" openapi:"min=1,max=1000000"`
}

// MaxQuantity is the largest quantity one order may reserve.
const MaxQuantity = 1_000_000

// Validate names the first invalid field.
func (p ReserveStockPayload) Validate() error {
	for _, f := range []struct{ name, v string }{{"tenant_id", p.TenantID}, {"order_id", p.OrderID}, {"sku", p.SKU}} {
		if err := tasks.CheckID(f.name, f.v); err != nil {
			return err
		}
	}
	if p.Quantity < 1 || p.Quantity > MaxQuantity {
		return &tasks.FieldError{Field: "quantity", Detail: fmt.Sprintf("must be 1..%d, got %d", MaxQuantity, p.Quantity)}
	}
	return nil
}

// Resource is what the lease protects: the tenant's SKU.
func (p ReserveStockPayload) Resource() string { return skuResource(p.TenantID, p.SKU) }

func skuResource(tenant, sku string) string { return tenant + ":" + sku }

// stockKey is the SKU's stock hash (reserved total, orders applied; its own fence record) and
// ledgerKey its list of applied orders, both in the SKU's slot.
func stockKey(locks *locking.Client, tenant, sku string) string {
	return engine.ResourceKey(locks, skuResource(tenant, sku), "stock")
}

func ledgerKey(locks *locking.Client, tenant, sku string) string {
	return engine.ResourceKey(locks, skuResource(tenant, sku), "ledger")
}

// OpKey makes each (tenant, order) apply once, whichever job carries it.
func (p ReserveStockPayload) OpKey() string { return "order:" + p.TenantID + ":" + p.OrderID }

// Identity is the order: (tenant, order id), bound to its sku and quantity for ever. A request
// for the same order with another sku or quantity is refused, and a job that carries one fails.
func (p ReserveStockPayload) Identity() tasks.Identity {
	return tasks.Identity{Name: p.OpKey(), Fingerprint: tasks.Fingerprint(p.SKU, strconv.Itoa(p.Quantity)),
		Field: "order_id", What: "order " + p.OrderID}
}

// Tenant is the tenant the order is for.
func (p ReserveStockPayload) Tenant() string { return p.TenantID }

// Spec is the job a validated payload is enqueued as: duplicates of an order collapse until its
// job ends, and its effect applies once per order whatever happens.
func (p ReserveStockPayload) Spec() engine.Spec {
	b, _ := json.Marshal(p)
	return engine.Spec{Type: TypeReserveStock, Tenant: p.TenantID, Resource: p.Resource(), Payload: b, OpKey: p.OpKey(),
		Dedup: &engine.Dedup{Policy: engine.UntilDone, Key: p.OpKey()}}
}

// Task is reserve-stock as the registry lists it.
var Task = tasks.Task{
	// Applied-order records are live data: they never expire (AppliedTTL 0).
	Description: "Reserves stock for an order, once per (tenant, order). " +
		"A second request for the same order with another sku or quantity is 409 order_conflict.",
	Type: TypeReserveStock,
	Config: middleware.Job{Queue: "critical", MaxAttempts: 8,
		// Limits count per tenant; none by default (TASK_LIMITS sets them per deployment).
		Limit: middleware.Limit{Key: tasks.ByTenant}},
	Request: func() tasks.Request { return &ReserveStockPayload{} },
	Routes: []tasks.Route{{Method: http.MethodGet, Path: "/stock/:tenant/:sku", Tenant: "tenant",
		Params: map[string]func(string) error{"tenant": tasks.IDParam("tenant"), "sku": tasks.IDParam("sku")},
		Read: func(ctx context.Context, r tasks.ReadDeps, params map[string]string) (any, error) {
			if r.SQL != nil {
				return readStockSQL(ctx, r.SQL, params["tenant"], params["sku"])
			}
			return ReadStock(ctx, r.Locks, params["tenant"], params["sku"])
		},
		Summary:  "A SKU's reserved total and applied orders (zeros for one nothing was reserved of)",
		Response: Stock{}}},
	Commands: []tasks.Command{{Path: "/orders", Accept: func() tasks.Request { return &ReserveStockPayload{} }, Do: placeOrder, SQL: true,
		Summary: "Record an order in PostgreSQL and its reserve-stock job in the same transaction",
		Replies: []tasks.Reply{
			{Status: http.StatusOK, Description: "The order was recorded before: its job.", Body: tasks.QueuedJob{}},
			{Status: http.StatusAccepted, Description: "Recorded and queued.", Body: tasks.QueuedJob{}},
		}}},
	SQLSchema:  reserveStockSchema,
	SQLVersion: 101,
	SQLFenced:  true,
	Handler: func(d tasks.Deps) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			job, _ := middleware.RunFrom(ctx)
			var p ReserveStockPayload
			if err := json.Unmarshal(t.Payload(), &p); err != nil {
				return middleware.Permanent(fmt.Errorf("payload: %w", err))
			}
			if err := p.Validate(); err != nil {
				return middleware.Permanent(err)
			}
			// The applied-order record lives in the sku's slot: only the order's claim stops the
			// same order from applying on another sku.
			if err := tasks.CheckIdentity(ctx, job, p.Identity()); err != nil {
				return err
			}
			total, err := reserve(ctx, d, job, p)
			if errors.Is(err, middleware.ErrAlreadyApplied) {
				job.SetResult("already_applied")
				return nil
			}
			if err != nil {
				return err
			}
			job.SetResult("reserved_total=" + fmt.Sprint(total))
			return nil
		})
	},
}

// reserve applies the order: in PostgreSQL when the process has DATABASE_URL, else in Redis.
func reserve(ctx context.Context, d tasks.Deps, job *middleware.Run, p ReserveStockPayload) (any, error) {
	if d.SQL != nil {
		return applySQL(ctx, d.SQL, job, p)
	}
	locks := job.Locks()
	return job.Apply(ctx, reserveEffect, stockKey(locks, p.TenantID, p.SKU),
		[]string{ledgerKey(locks, p.TenantID, p.SKU)}, p.Quantity, p.OrderID)
}

// reserveEffect commits the reserved total, the ledger entry and (by Apply) the applied-order
// record in one fenced script.
var reserveEffect = middleware.NewEffect(scripts.Read("reserve_effect.lua"))

// Stock is the read model of a tenant's SKU.
type Stock struct {
	TenantID      string `json:"tenant_id"`
	SKU           string `json:"sku"`
	Reserved      int64  `json:"reserved"`
	OrdersApplied int64  `json:"orders_applied"`
	FencingToken  int64  `json:"fencing_token"`
}

// ReadStock reads a SKU's reserved total and applied orders in one round trip; GET
// /stock/{tenant}/{sku} answers it (zeros for a SKU nothing was reserved of).
func ReadStock(ctx context.Context, locks *locking.Client, tenant, sku string) (Stock, error) {
	vals, err := locks.Redis().HMGet(ctx, stockKey(locks, tenant, sku), "reserved", "orders", locking.FieldFenceToken).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return Stock{}, err
	}
	s := Stock{TenantID: tenant, SKU: sku}
	s.Reserved, s.OrdersApplied, s.FencingToken = toInt(vals[0]), toInt(vals[1]), toInt(vals[2])
	return s, nil
}

// toInt reads an integer field of a Redis hash; a missing or malformed one is 0.
func toInt(v any) int64 {
	s, _ := v.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
