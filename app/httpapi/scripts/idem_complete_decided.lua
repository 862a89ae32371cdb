-- idem_complete_decided: idem_complete for an answer sent in the pipeline of the decision it
-- answers, on one Redis node: stored only if that decision took, whatever the time. A decision
-- checks the request's deadline; an answer that checked it too could miss it by the time between
-- the two adjacent commands (a Redis stalled between them), leaving a job or a workflow created
-- without its answer (a retry with the key then created it again).
-- KEYS[1] idempotency record, KEYS[2] the hash the decision confirmed: a workflow's (its status is
-- "creating" until the decision takes, and the hash is gone if it never does) or a job's record
-- (its field confirmed is "0" until the confirmation takes, and the record is gone if it never does)
-- ARGV[1] claim token, ARGV[2] status, ARGV[3] body, ARGV[4] location, ARGV[5] retention ms
-- returns 1 when stored, 0 when the decision did not take or the claim was lost
local decided = redis.call('HMGET', KEYS[2], 'status', 'confirmed')
if not decided[1] or decided[1] == 'creating' or decided[2] == '0' then return 0 end
if redis.call('HGET', KEYS[1], 'claim') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'state', 'done', 'status', ARGV[2], 'body', ARGV[3], 'location', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
