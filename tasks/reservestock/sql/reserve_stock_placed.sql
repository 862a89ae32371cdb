-- placed: an order placed before. $1 tenant, $2 order id.
SELECT sku, quantity, job_id FROM reserve_stock_requests WHERE tenant = $1 AND order_id = $2
