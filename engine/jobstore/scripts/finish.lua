-- finish: end one run of a job, in one round trip: fenced final status, idempotency commit, lease
-- release.
-- KEYS[1] job record, KEYS[2] resource lease, KEYS[3] job timeline, KEYS[4] applied-operation
-- record (any key of the slot when none), KEYS[5] dedup marker (any key of the slot when none)
-- ARGV[1] fencing token, ARGV[2] lease owner, ARGV[3] outcome: done | retrying | failed | revoked |
-- queued (shutdown requeue), ARGV[4] now (unix ms), ARGV[5] error text,
-- ARGV[6] result, ARGV[7] retention ms, ARGV[8] timeline cap, ARGV[9] "1" to record the operation as
-- applied, ARGV[10] applied record TTL ms (0: kept), ARGV[11] delivery id, ARGV[12] event detail,
-- ARGV[13] worker id, ARGV[14] event name ('' for the outcome's own), ARGV[15] "1" to give the
-- attempt back (shutdown requeue, rate limit), ARGV[16] "1" to clear the dedup marker when the job
-- ends (until_done)
-- returns {"ok"}; {"gone"}; {"stale", current token}: a newer token wrote the record (a later run,
--         or a cancel, which raises the fence), nothing written but the timeline event; {"invalid", status}: the transition is not allowed.
local token, owner, outcome, now = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4]
local function push(name, detail)
  timeline_push(KEYS[3], ARGV[8], ARGV[7], event({at = tonumber(now), event = name, delivery = ARGV[11],
    token = token, worker = ARGV[13], detail = detail}))
end

-- fold: a run that ends done on the happy path (the record stands for the job's enqueued and this
-- first run's lease_acquired, and no event was stored since) stores no done event either: the
-- record's timeline_folded says it stands for all three (jobstore/fold.go rebuilds them on read).
-- The done event's worker is the finishing process's, the record's worker_id.
local function fold(rec)
  if outcome ~= 'done' or ARGV[12] ~= '' or ARGV[14] ~= '' or ARGV[15] == '1' or rec.worker_id ~= ARGV[13] then
    return false
  end
  local implied, by = timeline_implied(KEYS[1])
  if implied ~= 2 or redis.call('EXISTS', KEYS[3]) == 1 then return false end
  timeline_imply(KEYS[1], 3, by)
  return true
end

local rec = record_get(KEYS[1], {'status', 'delivery', 'attempt', 'job_id', 'worker_id'})
if not rec.status then lease_release(KEYS[2], owner) return {'gone'} end
local current = fence_check(KEYS[1], token, owner)
if current == token and fence_sealed(KEYS[1]) and rec.delivery == ARGV[11] then
  -- A final record is sealed against its last run's token: this is that run's finish again (a
  -- retried call), not a newer run's write; it is answered below as any second finish is.
  current = nil
end
if current then
  push('stale_write_rejected', outcome .. ' by token ' .. token .. ' after token ' .. current)
  lease_release(KEYS[2], owner)
  return {'stale', current}
end
if rec.status ~= 'processing' or rec.delivery ~= ARGV[11] then
  push('invalid_transition', rec.status .. ' -> ' .. outcome)
  lease_release(KEYS[2], owner)
  return {'invalid', rec.status}
end

redis.call('HSET', KEYS[1], 'status', outcome, 'updated_at', now, 'last_error', ARGV[5])
if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 'result', ARGV[6]) end
if ARGV[15] == '1' then
  redis.call('HSET', KEYS[1], 'attempt', math.max(0, tonumber(rec.attempt or '1') - 1))
end
if outcome == 'done' or outcome == 'failed' or outcome == 'revoked' then
  redis.call('HSET', KEYS[1], 'finished_at', now)
  record_compact(KEYS[1], owner, outcome ~= 'failed') -- a failed job may be replayed: not final
  if ARGV[16] == '1' and KEYS[5] ~= KEYS[1] and redis.call('GET', KEYS[5]) == rec.job_id then
    redis.call('DEL', KEYS[5])
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[7])
if ARGV[9] == '1' and outcome == 'done' then
  if tonumber(ARGV[10]) > 0 then
    redis.call('SET', KEYS[4], rec.job_id, 'PX', ARGV[10], 'NX')
  else
    redis.call('SET', KEYS[4], rec.job_id, 'NX')
  end
end
local names = {done = 'done', retrying = 'retry_scheduled', failed = 'failed', revoked = 'revoked', queued = 'requeued'}
local name = ARGV[14]
if name == '' then name = names[outcome] or outcome end
if not fold(rec) then push(name, ARGV[12]) end
lease_release(KEYS[2], owner)
return {'ok'}
