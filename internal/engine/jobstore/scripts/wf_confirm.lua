-- wf_confirm: every node of a new workflow was created and its roots delivered: the workflow's
-- hash is kept for the retention (it was a claim until now) and its status becomes running.
-- Only a claim is confirmed: a hash a settlement took back (wf_settle) is gone, and one confirmed
-- before (the same confirmation sent again) is left as it is.
-- KEYS[1] workflow hash
-- ARGV[1] deadline (unix ms in Redis's clock; 0 none), ARGV[2] retention ms
-- returns "confirmed"; "expired" past the deadline (nothing written: the claim runs out);
--         "gone" the hash is gone (its claim ran out, or a settlement took it back)
local wf = KEYS[1] -- a workflow's hash, not a job record
local status = redis.call('HGET', wf, 'status')
if not status then return 'gone' end
if status ~= 'creating' then return 'confirmed' end
if past_deadline(ARGV[1]) then return 'expired' end
redis.call('HSET', wf, 'status', 'running')
redis.call('PEXPIRE', wf, ARGV[2])
return 'confirmed'
