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
-- returns {"ok"}; {"gone"}; {"stale", current token}: a newer token wrote the record, nothing
--         written but the timeline event; {"invalid", status}: the transition is not allowed.
local token, owner, outcome, now = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4]
local function event(name, detail)
  local n = redis.call('RPUSH', KEYS[3], cjson.encode({at = tonumber(now), event = name, delivery = ARGV[11],
    token = token, worker = ARGV[13], detail = detail}))
  if n > tonumber(ARGV[8]) then redis.call('LTRIM', KEYS[3], -tonumber(ARGV[8]), -1) end
  redis.call('PEXPIRE', KEYS[3], ARGV[7])
end
local function release()
  if redis.call('GET', KEYS[2]) == owner then redis.call('DEL', KEYS[2]) end
end

local cur = redis.call('HMGET', KEYS[1], '_fence_token', '_fence_owner', 'status', 'delivery', 'attempt')
if not cur[3] then release() return {'gone'} end
local cur_token = tonumber(cur[1])
if cur_token and (token < cur_token or (token == cur_token and cur[2] ~= owner)) then
  event('stale_write_rejected', outcome .. ' by token ' .. token .. ' after token ' .. cur_token)
  release()
  return {'stale', cur_token}
end
if cur[3] ~= 'processing' or cur[4] ~= ARGV[11] then
  event('invalid_transition', cur[3] .. ' -> ' .. outcome)
  release()
  return {'invalid', cur[3]}
end

redis.call('HSET', KEYS[1], 'status', outcome, 'updated_at', now, 'last_error', ARGV[5])
if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 'result', ARGV[6]) end
if ARGV[15] == '1' then
  redis.call('HSET', KEYS[1], 'attempt', math.max(0, tonumber(cur[5] or '1') - 1))
end
if outcome == 'done' or outcome == 'failed' or outcome == 'revoked' then
  redis.call('HSET', KEYS[1], 'finished_at', now)
  if ARGV[16] == '1' and KEYS[5] ~= KEYS[1] and redis.call('GET', KEYS[5]) == redis.call('HGET', KEYS[1], 'job_id') then
    redis.call('DEL', KEYS[5])
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[7])
if ARGV[9] == '1' and outcome == 'done' then
  local job = redis.call('HGET', KEYS[1], 'job_id')
  if tonumber(ARGV[10]) > 0 then
    redis.call('SET', KEYS[4], job, 'PX', ARGV[10], 'NX')
  else
    redis.call('SET', KEYS[4], job, 'NX')
  end
end
local names = {done = 'done', retrying = 'retry_scheduled', failed = 'failed', revoked = 'revoked', queued = 'requeued'}
local name = ARGV[14]
if name == '' then name = names[outcome] or outcome end
event(name, ARGV[12])
release()
return {'ok'}
