-- idem_forget: take back the answer a request stored and then could not give (durable mode: the
-- replicas did not acknowledge the enqueue), so a retry with the same key runs again instead of
-- replaying an answer that may not survive a failover.
-- KEYS[1] idempotency record
-- ARGV[1] claim token
-- returns 1 when removed, 0 when the record is not this request's answer
local rec = redis.call('HMGET', KEYS[1], 'state', 'claim')
if rec[1] == 'done' and rec[2] == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
