-- inspect: a consistent view of a resource's lease and fence (body on protocol.lua).
-- KEYS[1] lease key, KEYS[2] fence counter key
-- ARGV: none
-- returns {owner or false, remaining lease TTL in ms (-2 when free), current fence (0 when never drawn)}
return {lease_holder(KEYS[1]), redis.call('PTTL', KEYS[1]), fence_last(KEYS[2])}
