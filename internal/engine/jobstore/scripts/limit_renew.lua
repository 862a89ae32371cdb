-- limit_renew: extend a held slot of a key's limit (the limit keeper's batches).
-- KEYS[1] holders (sorted set)
-- ARGV[1] owner, ARGV[2] slot TTL ms
-- returns 1 when the owner held an unexpired slot (its expiry is now + TTL), 0 when it had lapsed
--         or was released (nothing written).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local exp = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if not exp or exp <= now then return 0 end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1
