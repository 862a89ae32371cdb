-- acquire: take the lease on a resource and draw its next fencing token, atomically (body on
-- protocol.lua: lease_acquire).
-- KEYS[1] lease key ({tag}:lock), KEYS[2] fence counter key ({tag}:fence)
-- ARGV[1] owner (fresh per acquisition), ARGV[2] lease TTL in ms,
-- ARGV[3] fence counter TTL in ms (0: the counter never expires),
-- ARGV[4] optional token floor (default 0): the drawn token is greater than it, even when the
-- counter was lost
-- returns {1, token} when acquired (or when this owner already holds it: a retried call must not
--         draw a second token), {0, remaining lease TTL in ms} when another owner holds it.
local ok, n = lease_acquire(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
if ok then return {1, n} end
return {0, n}
