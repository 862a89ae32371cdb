-- total: add an applied order to its SKU's totals. $1 tenant, $2 sku, $3 quantity, $4 fencing
-- token. Returns the new reserved total.
INSERT INTO reserve_stock AS s (tenant, sku, reserved, orders, fencing_token) VALUES ($1, $2, $3, 1, $4)
ON CONFLICT (tenant, sku) DO UPDATE
    SET reserved = s.reserved + EXCLUDED.reserved, orders = s.orders + 1, fencing_token = EXCLUDED.fencing_token
RETURNING reserved
