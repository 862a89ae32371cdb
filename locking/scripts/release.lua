-- release: delete a lease, only for its owner.
-- KEYS[1] lease key
-- ARGV[1] owner
-- returns 1 when deleted, 0 when the lease is gone or held by another owner.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
