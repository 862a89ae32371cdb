-- idem_release: give a claimed key back after an infrastructure failure, so a retry can run.
-- KEYS[1] idempotency record
-- ARGV[1] claim token
-- returns 1 when released, 0 when the key is not this claim's (anymore)
local rec = redis.call('HMGET', KEYS[1], 'state', 'claim')
if rec[1] == 'claimed' and rec[2] == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
