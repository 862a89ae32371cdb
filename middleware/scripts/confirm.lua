-- confirm: asynq took the job's first delivery: the job is marked confirmed, its dedup marker stops
-- being pending and (still naming the job) now lasts the policy's TTL instead of the short claim.
-- KEYS[1] dedup marker, KEYS[2] the marker's pending flag, KEYS[3] job record
-- ARGV[1] job id, ARGV[2] policy TTL ms (0: keep the marker's TTL, e.g. a throttle window)
-- returns 1 when extended, 0 when the marker is gone or names another job (e.g. the job started)
if redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('HSET', KEYS[3], 'confirmed', '1')
end
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('DEL', KEYS[2])
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  if tonumber(ARGV[2]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
  return 1
end
return 0
