-- create: write a new job's record, which stands for its first timeline event (enqueued, and
-- waiting for a job that waits for its key's admission: no list is written), unless a dedup marker names a job that covers it; before the job's first delivery
-- is enqueued. The record, its timeline and a new
-- marker are a claim until confirm: they live only for the claim TTL, and a delivery that finds
-- the record unconfirmed does not run it. asynq may still refuse the delivery (then abandon removes
-- the job) or the request may give up; either way nothing outlives the claim.
-- KEYS[1] job record, KEYS[2] job timeline (not written here), KEYS[3] dedup marker (the record key when none),
-- KEYS[4] the marker's pending flag (the record key when none)
-- ARGV[1] deadline (unix ms in Redis's clock; 0 none): past it the request has given up and
-- nothing is written, ARGV[2] the enqueuing worker (the enqueued event's), ARGV[3] dedup policy ('' none), ARGV[4] marker TTL ms
-- (the claim until the enqueue is confirmed; the window for throttle), ARGV[5] job id,
-- ARGV[6] claim TTL ms (record, timeline, pending flag), ARGV[7..] field, value, ...
-- returns {"created"}; {"dup", existing job id}; {"replace", existing job id} (policy replace: the
--         caller replaces that job's payload); {"pending", existing job id}: the marker's job is
--         not confirmed yet (its enqueue may still fail), ask again; {"exists"} when the id is
--         taken; {"expired"} past the deadline (nothing written in these last two)
if past_deadline(ARGV[1]) then return {'expired'} end
if ARGV[3] ~= '' then
  local existing = redis.call('GET', KEYS[3])
  if existing then
    if redis.call('GET', KEYS[4]) == existing then return {'pending', existing} end
    -- The marker's job is in this slot (same resource); its record's key differs from this new
    -- job's by the id alone. A marker whose job never got confirmed and ran out covers nothing.
    local existing_record = string.sub(KEYS[1], 1, #KEYS[1] - #ARGV[5]) .. existing
    if redis.call('EXISTS', existing_record) == 0 then
      redis.call('DEL', KEYS[3])
      existing = nil
    end
  end
  if existing then
    if ARGV[3] == 'replace' then return {'replace', existing} end
    return {'dup', existing}
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists'} end
redis.call('HSET', KEYS[1], 'confirmed', '0', unpack(ARGV, 7))
-- A job that waits for its key's admission (a fair_key field) stands for its waiting event too.
local lead = 1
for i = 7, #ARGV, 2 do
  if ARGV[i] == 'fair_key' then lead = 2 end
end
timeline_imply(KEYS[1], lead, ARGV[2], lead)
redis.call('PEXPIRE', KEYS[1], ARGV[6])
if ARGV[3] ~= '' then
  redis.call('SET', KEYS[3], ARGV[5], 'PX', ARGV[4])
  redis.call('SET', KEYS[4], ARGV[5], 'PX', ARGV[6])
end
return {'created'}
