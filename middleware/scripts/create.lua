-- create: write a new job's record and first timeline event, unless a dedup marker names a job
-- that covers it; before the job's first delivery is enqueued. A new marker is pending until
-- confirm: asynq may still refuse the job's delivery, and then abandon removes the job.
-- KEYS[1] job record, KEYS[2] job timeline, KEYS[3] dedup marker (the record key when none),
-- KEYS[4] the marker's pending flag (the record key when none)
-- ARGV[1] retention ms, ARGV[2] event JSON, ARGV[3] dedup policy ('' none), ARGV[4] marker TTL ms
-- (a short claim until the enqueue is confirmed; the window for throttle), ARGV[5] job id,
-- ARGV[6] pending flag TTL ms (the claim), ARGV[7..] field, value, ...
-- returns {"created"}; {"dup", existing job id}; {"replace", existing job id} (policy replace: the
--         caller replaces that job's payload); {"pending", existing job id}: the marker's job is
--         not confirmed yet (its enqueue may still fail), ask again; {"exists"} when the id is
--         taken (nothing written)
if ARGV[3] ~= '' then
  local existing = redis.call('GET', KEYS[3])
  if existing then
    if redis.call('GET', KEYS[4]) == existing then return {'pending', existing} end
    if ARGV[3] == 'replace' then return {'replace', existing} end
    return {'dup', existing}
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists'} end
redis.call('HSET', KEYS[1], unpack(ARGV, 7))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
if ARGV[3] ~= '' then
  redis.call('SET', KEYS[3], ARGV[5], 'PX', ARGV[4])
  redis.call('SET', KEYS[4], ARGV[5], 'PX', ARGV[6])
end
return {'created'}
