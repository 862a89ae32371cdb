-- cancel: end a job that has not ended, by an operator or its tenant, in one round trip: status
-- cancelled, dedup marker released, timeline event. A running job's resource is also taken from
-- its run: the fence is raised (a token drawn from the resource's counter with lease_acquire, above
-- every token the record has seen, is recorded as the record's fence), so the run's finish, checkpoints and
-- progress are refused as stale from this script on; and its lease is deleted, so the keeper's
-- next renewal (a third of the TTL at the latest) is refused and the run's context is cancelled.
-- KEYS[1] job record, KEYS[2] resource lease, KEYS[3] resource fence counter, KEYS[4] job timeline,
-- KEYS[5] dedup marker (the record key when none)
-- ARGV[1] now (unix ms), ARGV[2] retention ms, ARGV[3] timeline cap, ARGV[4] who cancels,
-- ARGV[5] why, ARGV[6] worker id (of the process that runs the cancel)
-- returns {"cancelled", status before, delivery, fence token (0 unless it was processing)};
--         {"gone"} no record; {"ended", status} the job had ended already: nothing written
local now = ARGV[1]
local rec = record_get(KEYS[1], {'status', 'delivery', 'job_id', 'lease_owner', 'resource', 'attempt'})
if not rec.status then return {'gone'} end
if rec.status == 'done' or rec.status == 'failed' or rec.status == 'revoked' or rec.status == 'cancelled' or
  rec.status == 'expired' or rec.status == 'skipped' then
  return {'ended', rec.status}
end

local token = 0
if rec.status == 'processing' then
  -- The run's lease is deleted, and a token drawn the protocol's way: lease_acquire by the cancel
  -- itself (above the record's floor), released at once; nothing outside the script sees it held.
  -- If another owner already holds the lease (the run's lapsed and the next job of the resource
  -- took it), its token was drawn after the run's: the highest of the two outranks the run.
  if rec.lease_owner then lease_release(KEYS[2], rec.lease_owner) end
  local owner = 'cancel:' .. rec.job_id
  local ok, drawn = lease_acquire(KEYS[2], KEYS[3], owner, 1, 0, fence_seen(KEYS[1]))
  if ok then
    token = drawn
    lease_release(KEYS[2], owner)
  else
    token = math.max(fence_last(KEYS[3]), fence_seen(KEYS[1]) + 1)
  end
  fence_record(KEYS[1], token, owner)
end
if KEYS[5] ~= KEYS[1] and redis.call('GET', KEYS[5]) == rec.job_id then
  redis.call('DEL', KEYS[5])
end
local why = ARGV[5]
if why == '' then why = 'cancelled' end
redis.call('HSET', KEYS[1], 'status', 'cancelled', 'finished_at', now, 'updated_at', now, 'last_error', why)
-- The run's handler may still be returning: a sequence's next job waits for it (cancelled_run).
if rec.status == 'processing' then redis.call('HSET', KEYS[1], 'cancelled_run', now) end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local detail = 'by ' .. ARGV[4] .. ' (was ' .. rec.status .. ')'
if ARGV[5] ~= '' then detail = detail .. ': ' .. ARGV[5] end
timeline_push(KEYS[4], ARGV[3], ARGV[2], event({at = tonumber(now), event = 'cancelled', delivery = rec.delivery,
  token = token, attempt = tonumber(rec.attempt or '0'), worker = ARGV[6], detail = detail}))
return {'cancelled', rec.status, rec.delivery or '', token}
