-- read: a SKU's totals. $1 tenant, $2 sku. No row: nothing was reserved of it.
SELECT reserved, orders, fencing_token FROM reserve_stock WHERE tenant = $1 AND sku = $2
