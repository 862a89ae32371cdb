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

-- folded: a run that ends done on the happy path (the record stands for the job's enqueued and this
-- first run's lease_acquired, and no event was stored since) stores no done event either: the
-- record's timeline_folded says it stands for all three (all four after a waiting: jobstore/fold.go
-- rebuilds them on read).
-- The done event's worker is the finishing process's, the record's worker_id. It returns the
-- record's new mark (written with the end's fields), nil when the run does not fold.
local function folded(rec)
  if outcome ~= 'done' or ARGV[12] ~= '' or ARGV[14] ~= '' or ARGV[15] == '1' or rec.worker_id ~= ARGV[13] then
    return nil
  end
  local implied, by, lead = timeline_mark_of(rec.timeline_folded)
  if implied ~= lead + 1 or redis.call('EXISTS', KEYS[3]) == 1 then return nil end
  return timeline_mark(lead + 2, by, lead)
end

-- What the end reads, besides status and the fence, is read with them: record_end_fields.
local rec = record_get(KEYS[1], {'status', 'delivery', 'worker_id', 'timeline_folded', 'deliveries', 'created_at'})
local job_id = record_id(KEYS[1])
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

local ended = outcome == 'done' or outcome == 'failed' or outcome == 'revoked'
local final = ended and outcome ~= 'failed' -- a failed job may be replayed: not final
-- One HSET: what a final record would drop at once (updated_at, an empty last_error) is not written.
local set = {'status', outcome}
if not final then set[#set + 1], set[#set + 2] = 'updated_at', now end
if not ended or ARGV[5] ~= '' then set[#set + 1], set[#set + 2] = 'last_error', ARGV[5] end
if ARGV[6] ~= '' then set[#set + 1], set[#set + 2] = 'result', ARGV[6] end
if ended then set[#set + 1], set[#set + 2] = 'finished_at', now end
local mark = folded(rec)
if mark then set[#set + 1], set[#set + 2] = 'timeline_folded', mark end
if ARGV[15] == '1' then
  set[#set + 1], set[#set + 2] = 'attempt', math.max(0, (tonumber(redis.call('HGET', KEYS[1], 'attempt')) or 1) - 1)
end
redis.call('HSET', KEYS[1], unpack(set))
if ended then
  rec.last_error = ARGV[5]
  record_compact(KEYS[1], rec, final)
  if ARGV[16] == '1' and KEYS[5] ~= KEYS[1] and redis.call('GET', KEYS[5]) == job_id then
    redis.call('DEL', KEYS[5])
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[7])
if ARGV[9] == '1' and outcome == 'done' then
  if tonumber(ARGV[10]) > 0 then
    redis.call('SET', KEYS[4], job_id, 'PX', ARGV[10], 'NX')
  else
    redis.call('SET', KEYS[4], job_id, 'NX')
  end
end
local names = {done = 'done', retrying = 'retry_scheduled', failed = 'failed', revoked = 'revoked', queued = 'requeued'}
local name = ARGV[14]
if name == '' then name = names[outcome] or outcome end
if not mark then push(name, ARGV[12]) end
lease_release(KEYS[2], owner)
return {'ok'}
