-- renew: extend a lease, only for its owner.
-- KEYS[1] lease key
-- ARGV[1] owner, ARGV[2] lease TTL in ms
-- returns 1 when extended, 0 when the lease is gone or held by another owner.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
