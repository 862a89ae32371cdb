-- inspect: a consistent view of a resource's lease and fence.
-- KEYS[1] lease key, KEYS[2] fence counter key
-- ARGV: none
-- returns {owner or false, remaining lease TTL in ms (-2 when free), current fence (0 when never drawn)}
local owner = redis.call('GET', KEYS[1])
local ttl = redis.call('PTTL', KEYS[1])
local fence = tonumber(redis.call('GET', KEYS[2]) or '0')
return {owner, ttl, fence}
