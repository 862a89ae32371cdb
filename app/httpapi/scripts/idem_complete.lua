-- idem_complete: store the answer of a claimed request for the retention period.
-- KEYS[1] idempotency record
-- ARGV[1] claim token, ARGV[2] status, ARGV[3] body, ARGV[4] location, ARGV[5] retention ms,
-- ARGV[6] the request's deadline (unix ms in Redis's clock; 0 none): past it the request answered
-- that nothing was kept, so nothing is stored (the claim runs out)
-- returns 1 when stored, 0 when the claim was lost (it expired and another request took the key)
-- or the deadline has passed
if past_deadline(ARGV[6]) then return 0 end
if redis.call('HGET', KEYS[1], 'claim') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'state', 'done', 'status', ARGV[2], 'body', ARGV[3], 'location', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
