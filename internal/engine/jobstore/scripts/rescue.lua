-- rescue: a job whose worker died or paused (its run's lease lapsed and its heartbeat is older than
-- the lease TTL) gets a new delivery: status retrying (event rescued, the lost attempt counted), or
-- failed when that was its last attempt. Several rescuers may race: only the one that still finds
-- the active delivery current wins.
-- KEYS[1] job record, KEYS[2] resource lease, KEYS[3] job timeline, KEYS[4] dedup marker (the
-- record key when none)
-- ARGV[1] the active delivery id, ARGV[2] now (unix ms), ARGV[3] lease TTL ms, ARGV[4] retention
-- ms, ARGV[5] timeline cap, ARGV[6] rescuer's worker id, ARGV[7] "1" to clear the marker when the
-- job ends (until_done)
-- returns {"rescued", new delivery id, heartbeat ms}; {"failed", heartbeat ms}; {"skip"} (not
--         processing, or not this delivery); {"alive"} (its lease is held or it beat recently);
--         {"rescued_before", delivery id}: the job is retrying with the delivery after this one, as
--         a rescue of this one left it at least 10 s ago (nothing written): the caller enqueues it
--         if asynq lacks it (the rescue's enqueue failed, and so did its put-back)
local rec = record_get(KEYS[1], {'status', 'delivery', 'heartbeat_at', 'attempt', 'max_attempts', 'job_id', 'lease_owner',
  'deliveries', 'updated_at'})
-- Only a rescue older than a rescuer's own enqueue and put-back (a few seconds at most) was left half
-- done: a younger one may be another rescuer's, between its record write and its enqueue, which that
-- rescuer finishes or undoes itself.
local half_done_after = 10000
if rec.status == 'retrying' and rec.job_id and tonumber(rec.updated_at or '0') <= tonumber(ARGV[2]) - half_done_after then
  local n = tonumber(string.match(ARGV[1], '%.d(%d+)$') or '')
  local next = n and rec.job_id .. '.d' .. (n + 1)
  if next and ARGV[1] == rec.job_id .. '.d' .. n and rec.delivery == next and tonumber(rec.deliveries) == n + 1 then
    return {'rescued_before', next}
  end
end
if rec.status ~= 'processing' or rec.delivery ~= ARGV[1] then return {'skip'} end
local now = tonumber(ARGV[2])
local beat = tonumber(rec.heartbeat_at or '0')
if (rec.lease_owner and lease_holder(KEYS[2]) == rec.lease_owner) or now - beat < tonumber(ARGV[3]) then return {'alive'} end
local function push(name, delivery, detail)
  timeline_push(KEYS[3], ARGV[5], ARGV[4], event({at = now, event = name, delivery = delivery,
    attempt = tonumber(rec.attempt), worker = ARGV[6], detail = detail}))
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if tonumber(rec.attempt) >= tonumber(rec.max_attempts) then
  redis.call('HSET', KEYS[1], 'status', 'failed', 'finished_at', ARGV[2], 'updated_at', ARGV[2],
    'last_error', 'worker lost during the last attempt')
  push('rescued', ARGV[1], 'lease lapsed ' .. (now - beat) .. ' ms after the last heartbeat; no attempt left')
  push('failed', ARGV[1], 'attempt budget of ' .. rec.max_attempts .. ' spent')
  if ARGV[7] == '1' and KEYS[4] ~= KEYS[1] and redis.call('GET', KEYS[4]) == rec.job_id then
    redis.call('DEL', KEYS[4]) -- ended: the marker covers no new request any more
  end
  return {'failed', beat}
end
local n = redis.call('HINCRBY', KEYS[1], 'deliveries', 1)
local delivery = rec.job_id .. '.d' .. n
redis.call('HSET', KEYS[1], 'status', 'retrying', 'delivery', delivery, 'updated_at', ARGV[2],
  'last_error', 'worker lost')
push('rescued', delivery, 'lease lapsed; previous delivery ' .. ARGV[1])
return {'rescued', delivery, beat}
