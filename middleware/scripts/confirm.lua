-- confirm: asynq took the job's first delivery; its dedup marker (still naming it) now lasts the
-- policy's TTL instead of the short claim.
-- KEYS[1] dedup marker
-- ARGV[1] job id, ARGV[2] policy TTL ms
-- returns 1 when extended, 0 when the marker is gone or names another job (e.g. the job started)
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
