-- wf_cancel: mark a running workflow cancelled, so that no node is released or skipped from now
-- on; the caller then cancels every node that has not ended (each end is told to wf_ended as
-- usual, and the last makes the workflow cancelled).
-- KEYS[1] workflow hash
-- ARGV[1] retention ms
-- returns {"cancelling", node order}; {"gone"}; {"ended", status} it had ended
local wf = KEYS[1] -- a workflow's hash, not a job record
local status = redis.call('HGET', wf, 'status')
if not status then return {'gone'} end
if status ~= 'running' then return {'ended', status} end
redis.call('HSET', wf, 'cancelled', '1')
redis.call('PEXPIRE', wf, ARGV[1])
return {'cancelling', redis.call('HGET', wf, 'order') or ''}
