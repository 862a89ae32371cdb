-- expire: the deadline sweep's check of one job it indexed (Store.ExpireDue): a waiting job
-- (queued, scheduled or retrying) past its start_by, or whose record has no more than the margin
-- left to live, ends expired (event expired, reason start_by or retention) instead of running
-- late or vanishing when its record's TTL runs out; its pending delivery, if asynq still has it,
-- is refused at start. Any other job is left as it is and told when to look again.
-- KEYS[1] job record, KEYS[2] job timeline, KEYS[3] dedup marker (the record key when none)
-- ARGV[1] now (unix ms), ARGV[2] retention ms, ARGV[3] timeline cap, ARGV[4] worker id,
-- ARGV[5] margin ms
-- returns {"expired", reason, status before, delivery, queue}; {"gone"} no record; {"ended"} the
--         job had ended; {"later", ms}: look again in ms (it runs, or waits with time left)
local now, margin = tonumber(ARGV[1]), tonumber(ARGV[5])
local rec = record_get(KEYS[1], {'status', 'start_by', 'job_id', 'delivery', 'attempt', 'queue', 'confirmed'})
if not rec.status then return {'gone'} end
if rec.status == 'done' or rec.status == 'failed' or rec.status == 'revoked' or rec.status == 'cancelled' or
  rec.status == 'expired' or rec.status == 'skipped' then
  return {'ended'}
end
local ttl = redis.call('PTTL', KEYS[1])
-- A held workflow node waits too: one whose parents never end expires (retention) and its
-- workflow goes on without it.
local waiting = (rec.status == 'queued' or rec.status == 'retrying' or rec.status == 'held' or rec.status == 'waiting') and rec.confirmed ~= '0'
local start_by = tonumber(rec.start_by or '0')
local reason, why
if waiting and start_by > 0 and now > start_by then
  reason, why = 'start_by', 'not started by its start_by'
elseif waiting and ttl >= 0 and ttl <= margin then
  reason, why = 'retention', 'waited until its record had ' .. ttl .. ' ms of the retention left'
end
if reason then
  job_expire(KEYS[1], KEYS[2], KEYS[3], rec, ARGV[1], reason, why, ARGV[3], ARGV[2], ARGV[4])
  return {'expired', reason, rec.status, rec.delivery or '', rec.queue or ''}
end
local later = margin
if ttl > margin then later = ttl - margin end
if waiting and start_by > now then later = math.min(later, start_by - now + 1) end
return {'later', math.max(later, 1000)}
