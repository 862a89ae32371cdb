-- start: begin one delivery of a job, in one round trip: stale-delivery check, resource lease and
-- fencing token, attempt count, status processing, already-applied check, last checkpoint.
-- KEYS[1] job record (hash), KEYS[2] resource lease, KEYS[3] resource fence counter,
-- KEYS[4] job timeline (list), KEYS[5] applied-operation record (any key of the slot when none),
-- KEYS[6] dedup marker (any key of the slot when none)
-- ARGV[1] delivery id (asynq task id), ARGV[2] lease owner (fresh per delivery), ARGV[3] lease TTL ms,
-- ARGV[4] now (unix ms), ARGV[5] worker id, ARGV[6] timeline cap, ARGV[7] "1" when the job has an
-- operation key, ARGV[8] retention ms of the record and timeline, ARGV[9] when the dedup marker is
-- cleared: "start" (until_started, replace), "done" (until_done) or ""
-- returns {"run", token, attempt, payload, checkpoint, created_at}: the handler runs (a retried call by the same
--         owner returns the same token and attempt);
--         {"gone"} no record; {"terminal", status}; {"stale", current delivery}: acknowledge;
--         {"busy", remaining lease ms}: bounce, nothing spent;
--         {"applied"}: the operation was applied before, the job is done;
--         {"exhausted"}: no attempt left (the job is failed);
--         {"debounce", ms}: a replace set a later start; bounce for ms;
--         {"unconfirmed"}: the job's enqueue is not confirmed yet (it may still be refused, and
--         then the record runs out): nothing written, try again shortly.
local now = ARGV[4]
local rec_job
local function event(name, token, attempt, detail)
  local n = redis.call('RPUSH', KEYS[4], cjson.encode({at = tonumber(now), event = name, delivery = ARGV[1],
    token = token, attempt = attempt, worker = ARGV[5], detail = detail}))
  if n > tonumber(ARGV[6]) then redis.call('LTRIM', KEYS[4], -tonumber(ARGV[6]), -1) end
  redis.call('PEXPIRE', KEYS[4], ARGV[8])
end
local function clear_marker(when)
  if ARGV[9] == when and KEYS[6] ~= KEYS[1] and redis.call('GET', KEYS[6]) == rec_job then
    redis.call('DEL', KEYS[6])
  end
end
local function finish(status, token, name, detail)
  clear_marker('done')
  local last_error = detail or ''
  if status == 'done' then last_error = '' end -- already applied: the detail is the timeline's
  redis.call('HSET', KEYS[1], 'status', status, 'finished_at', now, 'updated_at', now, 'last_error', last_error)
  redis.call('PEXPIRE', KEYS[1], ARGV[8])
  event(name, token, nil, detail)
  if redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) end
end

local rec = redis.call('HMGET', KEYS[1], 'status', 'delivery', 'attempt', 'max_attempts', 'payload', 'checkpoint',
  'created_at', 'resource', '_fence_token', 'not_before', 'job_id', 'confirmed')
rec_job = rec[11]
local status = rec[1]
if not status then return {'gone'} end
if status == 'done' or status == 'failed' or status == 'revoked' then return {'terminal', status} end
if rec[2] ~= ARGV[1] then return {'stale', rec[2] or ''} end
if rec[12] == '0' then return {'unconfirmed'} end

local holder = redis.call('GET', KEYS[2])
if holder == ARGV[2] then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return {'run', tonumber(redis.call('GET', KEYS[3])), tonumber(rec[3]), rec[5] or '', rec[6] or '', tonumber(rec[7] or '0')}
end
local not_before = tonumber(rec[10] or '0')
if not_before > tonumber(now) then
  return {'debounce', not_before - tonumber(now)}
end
if holder then
  local ttl = redis.call('PTTL', KEYS[2])
  event('lease_not_acquired', nil, nil, 'held for ' .. ttl .. ' ms more')
  redis.call('PEXPIRE', KEYS[1], ARGV[8])
  return {'busy', ttl}
end
local token = redis.call('INCR', KEYS[3])
local seen = tonumber(rec[9] or '0')
if token <= seen then
  -- The counter expired or was lost while the record still holds a token: never go backwards.
  token = seen + 1
  redis.call('SET', KEYS[3], token)
end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
clear_marker('start')
if rec[8] == '' then
  -- The job is its own resource: its fence counter dies with its record.
  redis.call('PEXPIRE', KEYS[3], ARGV[8])
end
redis.call('HSET', KEYS[1], '_fence_token', token, '_fence_owner', ARGV[2], 'lease_owner', ARGV[2],
  'fencing_token', token, 'worker_id', ARGV[5])

if ARGV[7] == '1' and redis.call('EXISTS', KEYS[5]) == 1 then
  redis.call('HSET', KEYS[1], 'result', 'already_applied')
  finish('done', token, 'already_applied', 'operation applied by ' .. redis.call('GET', KEYS[5]))
  return {'applied'}
end
local attempt = tonumber(rec[3] or '0') + 1
if attempt > tonumber(rec[4]) then
  finish('failed', token, 'failed', 'attempt budget of ' .. rec[4] .. ' spent')
  return {'exhausted'}
end
redis.call('HSET', KEYS[1], 'status', 'processing', 'attempt', attempt, 'started_at', now,
  'heartbeat_at', now, 'updated_at', now)
redis.call('PEXPIRE', KEYS[1], ARGV[8])
event('lease_acquired', token, attempt, nil)
return {'run', token, attempt, rec[5] or '', rec[6] or '', tonumber(rec[7] or '0')}
