-- wf_settle: the answer to a workflow's confirmation was lost. Atomically against wf_confirm, the
-- workflow is decided: a hash still a claim is taken back (deleted: a confirmation arriving later
-- finds it gone), one that was confirmed stays. Nothing here depends on any clock.
-- KEYS[1] workflow hash
-- returns "confirmed" (it was: its nodes are to be confirmed); "abandoned" (it was a claim and is
--         gone now); "gone" (no hash: its claim ran out)
local wf = KEYS[1] -- a workflow's hash, not a job record
local status = redis.call('HGET', wf, 'status')
if not status then return 'gone' end
if status ~= 'creating' then return 'confirmed' end
redis.call('DEL', wf)
return 'abandoned'
