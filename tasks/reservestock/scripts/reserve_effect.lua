-- reserve_effect: reserve an order's quantity of a SKU and append it to the SKU's ledger
-- (reserve-stock). The body of an engine.NewEffect: the prelude has refused a stale token and an
-- order applied before, and the applied-order record is written with this body's changes.
-- KEYS[1] stock hash (reserved, orders; its own fence record), KEYS[2] applied-order record (the
-- effect's), KEYS[3] ledger list (one JSON entry per order: order, quantity, job, token)
-- ARGV[1] fencing token, ARGV[2] lease owner, ARGV[3] job id, ARGV[4] applied TTL ms (all the
-- effect's), ARGV[5] quantity, ARGV[6] order id
-- returns the new reserved total
local total = redis.call('HINCRBY', KEYS[1], 'reserved', ARGV[5])
redis.call('HINCRBY', KEYS[1], 'orders', 1)
redis.call('RPUSH', KEYS[3], cjson.encode({order = ARGV[6], quantity = tonumber(ARGV[5]), job = ARGV[3], token = tonumber(ARGV[1])}))
return total
