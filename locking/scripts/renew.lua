-- renew: extend a lease, only for its owner, and stamp its heartbeat.
-- KEYS[1] lease key, KEYS[2] heartbeat hash (optional: same slot, e.g. the job record)
-- ARGV[1] owner, ARGV[2] lease TTL in ms, ARGV[3] heartbeat field, ARGV[4] now (unix ms)
-- returns 1 when extended, 0 when the lease is gone or held by another owner.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  if KEYS[2] and redis.call('EXISTS', KEYS[2]) == 1 then
    redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
  end
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
