-- rescue: a job whose worker died or paused (its run's lease lapsed and its heartbeat is older than
-- the lease TTL) gets a new delivery: status retrying (event rescued, the lost attempt counted), or
-- failed when that was its last attempt. Several rescuers may race: only the one that still finds
-- the active delivery current wins.
-- KEYS[1] job record, KEYS[2] resource lease, KEYS[3] job timeline
-- ARGV[1] the active delivery id, ARGV[2] now (unix ms), ARGV[3] lease TTL ms, ARGV[4] retention
-- ms, ARGV[5] timeline cap, ARGV[6] rescuer's worker id
-- returns {"rescued", new delivery id, heartbeat ms}; {"failed", heartbeat ms}; {"skip"} (not
--         processing, or not this delivery); {"alive"} (its lease is held or it beat recently)
local rec = redis.call('HMGET', KEYS[1], 'status', 'delivery', 'heartbeat_at', 'attempt', 'max_attempts',
  'job_id', 'lease_owner')
if rec[1] ~= 'processing' or rec[2] ~= ARGV[1] then return {'skip'} end
local now = tonumber(ARGV[2])
local beat = tonumber(rec[3] or '0')
if redis.call('GET', KEYS[2]) == rec[7] or now - beat < tonumber(ARGV[3]) then return {'alive'} end
local function event(name, delivery, detail)
  local n = redis.call('RPUSH', KEYS[3], cjson.encode({at = now, event = name, delivery = delivery,
    attempt = tonumber(rec[4]), worker = ARGV[6], detail = detail}))
  if n > tonumber(ARGV[5]) then redis.call('LTRIM', KEYS[3], -tonumber(ARGV[5]), -1) end
  redis.call('PEXPIRE', KEYS[3], ARGV[4])
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if tonumber(rec[4]) >= tonumber(rec[5]) then
  redis.call('HSET', KEYS[1], 'status', 'failed', 'finished_at', ARGV[2], 'updated_at', ARGV[2],
    'last_error', 'worker lost during the last attempt')
  event('rescued', ARGV[1], 'lease lapsed ' .. (now - beat) .. ' ms after the last heartbeat; no attempt left')
  event('failed', ARGV[1], 'attempt budget of ' .. rec[5] .. ' spent')
  return {'failed', beat}
end
local n = redis.call('HINCRBY', KEYS[1], 'deliveries', 1)
local delivery = rec[6] .. '.d' .. n
redis.call('HSET', KEYS[1], 'status', 'retrying', 'delivery', delivery, 'updated_at', ARGV[2],
  'last_error', 'worker lost')
event('rescued', delivery, 'lease lapsed; previous delivery ' .. ARGV[1])
return {'rescued', delivery, beat}
