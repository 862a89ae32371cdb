-- holder_live: is a holder's slot of a key's limit live in Redis's clock (what limit_renew calls
-- unexpired)? The probe's step asks it after the process's own check (Job.LimitValidFor).
-- KEYS[1] the key's holders (sorted set: owner -> expiry, unix ms in Redis's clock)
-- ARGV[1] the holder (the run's lease owner)
-- returns 1 when the holder's expiry is after Redis's now, 0 when it has passed or is gone.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local exp = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if exp and exp > now then return 1 end
return 0
