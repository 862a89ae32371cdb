-- wf_confirm: every node of a new workflow was created and its roots delivered: the workflow's
-- hash is kept for the retention (it was a claim until now) and its status becomes running.
-- KEYS[1] workflow hash
-- ARGV[1] deadline (unix ms in Redis's clock; 0 none), ARGV[2] retention ms
-- returns "confirmed"; "expired" past the deadline (nothing written: the claim runs out);
--         "gone" the hash is gone (its claim ran out)
local wf = KEYS[1] -- a workflow's hash, not a job record
if past_deadline(ARGV[1]) then return 'expired' end
if redis.call('EXISTS', wf) == 0 then return 'gone' end
redis.call('HSET', wf, 'status', 'running')
redis.call('PEXPIRE', wf, ARGV[2])
return 'confirmed'
