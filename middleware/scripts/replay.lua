-- replay: a failed job gets a new delivery: status queued, attempts reset, delivery number + 1.
-- KEYS[1] job record, KEYS[2] job timeline
-- ARGV[1] now (unix ms), ARGV[2] retention ms, ARGV[3] timeline cap
-- returns {"ok", new delivery id, previous delivery id, previous attempt}; {"gone"};
--         {"conflict", status} unless failed; {"unrunnable"} when the record lacks its payload
local rec = redis.call('HMGET', KEYS[1], 'status', 'job_id', 'delivery', 'attempt', 'payload')
if not rec[1] then return {'gone'} end
if rec[1] ~= 'failed' then return {'conflict', rec[1]} end
if not rec[5] then return {'unrunnable'} end
local n = redis.call('HINCRBY', KEYS[1], 'deliveries', 1)
local delivery = rec[2] .. '.d' .. n
redis.call('HSET', KEYS[1], 'status', 'queued', 'attempt', 0, 'delivery', delivery, 'updated_at', ARGV[1],
  'last_error', '', 'finished_at', '')
local len = redis.call('RPUSH', KEYS[2], cjson.encode({at = tonumber(ARGV[1]), event = 'replayed', delivery = delivery}))
if len > tonumber(ARGV[3]) then redis.call('LTRIM', KEYS[2], -tonumber(ARGV[3]), -1) end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return {'ok', delivery, rec[3], rec[4]}
