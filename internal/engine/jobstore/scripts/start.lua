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
--         {"gone"} no record; {"terminal", status} (done, failed, revoked, cancelled, expired);
--         {"expired"}: the job waited past its start_by; it is expired now (nothing run);
--         {"stale", current delivery}: acknowledge;
--         {"busy", remaining lease ms}: bounce, nothing spent;
--         {"applied"}: the operation was applied before, the job is done;
--         {"exhausted"}: no attempt left (the job is failed);
--         {"debounce", ms}: a replace set a later start; bounce for ms;
--         {"untaken"}: a delivery numbered past the record's deliveries (a replay's, of a failed job,
--         or a rescue's, of an unstarted one) that the record has not taken yet: nothing written,
--         try again shortly;
--         {"unconfirmed"}: the job's enqueue is not confirmed yet (it may still be refused, and
--         then the record runs out): nothing written, try again shortly;
--         {"held"}: a workflow's node delivered before its release made it queued: nothing
--         written, try again shortly.
local now = ARGV[4]
-- Every field of the run's path in one read (the id is the key's); others when a rarer path needs them.
local rec = record_get(KEYS[1], {'status', 'delivery', 'attempt', 'max_attempts', 'payload', 'checkpoint',
  'created_at', 'resource', 'not_before', 'confirmed', 'start_by', 'timeline_folded'})
rec.job_id = record_id(KEYS[1])
local function push(name, token, attempt, detail)
  timeline_push(KEYS[4], ARGV[6], ARGV[8], event({at = tonumber(now), event = name, delivery = ARGV[1],
    token = token, attempt = attempt, worker = ARGV[5], detail = detail}))
end
local function clear_marker(when)
  if ARGV[9] == when and KEYS[6] ~= KEYS[1] and redis.call('GET', KEYS[6]) == rec.job_id then
    redis.call('DEL', KEYS[6])
  end
end
local function finish(status, token, name, detail)
  clear_marker('done')
  local last_error = detail or ''
  if status == 'done' then last_error = '' end -- already applied: the detail is the timeline's
  redis.call('HSET', KEYS[1], 'status', status, 'finished_at', now, 'updated_at', now, 'last_error', last_error)
  local ending = record_get(KEYS[1], record_end_fields)
  ending.last_error = last_error
  record_compact(KEYS[1], ending, status == 'done')
  redis.call('PEXPIRE', KEYS[1], ARGV[8])
  push(name, token, nil, detail)
  lease_release(KEYS[2], ARGV[2])
end

if not rec.status then return {'gone'} end
-- untaken: a delivery numbered past the record's deliveries, which a replay (of a failed job) or a
-- rescue of an unstarted delivery enqueues before the record takes it: a worker that dequeues it in
-- between asks again shortly; acknowledged, it would leave the record naming a delivery asynq lacks.
local function untaken()
  return (tonumber(string.match(ARGV[1], '%.d(%d+)$')) or 0) > (tonumber(redis.call('HGET', KEYS[1], 'deliveries')) or 1)
end
if rec.status == 'failed' and untaken() then return {'untaken'} end
if rec.status == 'done' or rec.status == 'failed' or rec.status == 'revoked' or rec.status == 'cancelled' or
  rec.status == 'expired' or rec.status == 'skipped' then
  return {'terminal', rec.status} -- a cancelled job's delivery that could not be deleted ends here
end
if rec.delivery ~= ARGV[1] then
  if untaken() then return {'untaken'} end
  return {'stale', rec.delivery or ''}
end
if rec.confirmed == '0' then return {'unconfirmed'} end
-- A workflow's node is delivered before its release makes it queued (wf_release.lua): a delivery
-- that comes first waits; a release whose process died is done again by the sweeper. A job that
-- waited for its key's admission (fair dispatch) has its delivery only once admitted: it starts.
if rec.status == 'held' then return {'held'} end
-- Deadline: a waiting job past its start_by ends expired instead of starting late (a processing
-- one started in time: a retried call, or asynq's redelivery of a lost run).
if (rec.status == 'queued' or rec.status == 'retrying' or rec.status == 'waiting') and tonumber(rec.start_by or '0') > 0 and
  tonumber(now) > tonumber(rec.start_by) then
  job_expire(KEYS[1], KEYS[4], KEYS[6], rec, now, 'start_by', 'not started by its start_by', ARGV[6], ARGV[8], ARGV[5])
  return {'expired'}
end

local not_before = tonumber(rec.not_before or '0')
if not_before > tonumber(now) and lease_holder(KEYS[2]) ~= ARGV[2] then
  return {'debounce', not_before - tonumber(now)}
end
-- The record's fence is the floor of the token: a counter that expired or was lost never makes a
-- token go backwards.
local ok, token, fresh = lease_acquire(KEYS[2], KEYS[3], ARGV[2], ARGV[3], 0, fence_seen(KEYS[1]))
if not ok then
  push('lease_not_acquired', nil, nil, 'held for ' .. token .. ' ms more')
  redis.call('PEXPIRE', KEYS[1], ARGV[8])
  return {'busy', token}
end
if not fresh then
  -- A retried call by the same owner: the same token and attempt, nothing drawn again.
  return {'run', token, tonumber(rec.attempt), rec.payload or '', rec.checkpoint or '', tonumber(rec.created_at or '0')}
end
clear_marker('start')
-- The record stands for its first run's lease_acquired while that run's fields are the record's:
-- a new run replaces them, so the event is written out first, where it belongs (position 1).
-- lead is that event's position: 1, or 2 after the waiting of a job that waited for its key.
local implied, by, lead = timeline_mark_of(rec.timeline_folded)
if implied == lead + 1 then
  local first = record_get(KEYS[1], {'started_at', 'fencing_token', 'worker_id'})
  redis.call('LPUSH', KEYS[4], timeline_stored(lead, event({at = tonumber(first.started_at), event = 'lease_acquired',
    delivery = rec.job_id .. '.d1', token = tonumber(first.fencing_token), attempt = 1, worker = first.worker_id})))
  redis.call('PEXPIRE', KEYS[4], ARGV[8])
  implied = lead
  timeline_imply(KEYS[1], implied, by, lead)
end
if (rec.resource or '') == '' then
  -- The job is its own resource: its fence counter dies with its record. A record written since
  -- the create leaves out an empty resource; one written before has it empty.
  redis.call('PEXPIRE', KEYS[3], ARGV[8])
end
fence_record(KEYS[1], token, ARGV[2])
local run = {'lease_owner', ARGV[2], 'fencing_token', token, 'worker_id', ARGV[5]}

if ARGV[7] == '1' and redis.call('EXISTS', KEYS[5]) == 1 then
  redis.call('HSET', KEYS[1], 'result', 'already_applied', unpack(run))
  finish('done', token, 'already_applied', 'operation applied by ' .. redis.call('GET', KEYS[5]))
  return {'applied'}
end
local attempt = tonumber(rec.attempt or '0') + 1
if attempt > tonumber(rec.max_attempts) then
  redis.call('HSET', KEYS[1], unpack(run))
  finish('failed', token, 'failed', 'attempt budget of ' .. rec.max_attempts .. ' spent')
  return {'exhausted'}
end
-- The first run's start, as the record says it, is not stored (jobstore/fold.go).
local folds = implied == lead and attempt == 1 and ARGV[1] == rec.job_id .. '.d1' and redis.call('EXISTS', KEYS[4]) == 0
if folds then run[#run + 1], run[#run + 2] = 'timeline_folded', timeline_mark(lead + 1, by, lead) end
redis.call('HSET', KEYS[1], 'status', 'processing', 'attempt', attempt, 'started_at', now,
  'heartbeat_at', now, 'updated_at', now, unpack(run))
redis.call('PEXPIRE', KEYS[1], ARGV[8])
if not folds then push('lease_acquired', token, attempt, nil) end
return {'run', token, attempt, rec.payload or '', rec.checkpoint or '', tonumber(rec.created_at or '0')}
