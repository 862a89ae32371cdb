-- apply: record the order, once per (tenant, order id). $1 tenant, $2 order id, $3 sku,
-- $4 quantity, $5 job id, $6 fencing token. No row affected: the order was applied before.
INSERT INTO reserve_stock_orders (tenant, order_id, sku, quantity, job_id, fencing_token)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (tenant, order_id) DO NOTHING
