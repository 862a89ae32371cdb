-- place: record an order request, once per (tenant, order id), with the id of the job that
-- reserves it. $1 tenant, $2 order id, $3 sku, $4 quantity, $5 job id. No row affected: the order
-- was placed before (placed reads it).
INSERT INTO reserve_stock_requests (tenant, order_id, sku, quantity, job_id)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (tenant, order_id) DO NOTHING
