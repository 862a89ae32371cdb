-- wf_ended: a workflow's node has ended (its job's status is terminal). Once per node (the node's
-- 'e:' field is the note), so each edge (node, child) is counted once however often the end is
-- told (the ending process, the sweeper's repair pass): every child's pending-parent count goes
-- down by one, and a child whose count reaches 0 is decided: released, or skipped when a parent
-- did not end done and its policy is all_done. A cancelled workflow decides nothing (its cancel
-- ends every node). The node's end is numbered (its 'n:' field: 1 for the first node to end, and
-- so on). When every node has ended the workflow's status becomes done (every node
-- done), cancelled (it was cancelled) or failed.
-- KEYS[1] workflow hash
-- ARGV[1] node id, ARGV[2] the node's job status, ARGV[3] now (unix ms), ARGV[4] retention ms
-- returns {"gone", ""} no workflow; {"unknown", status} no such node; {"noted", status} told
--         before; {"advanced", status, child, job id, action ("release" | "skip"), why, ...}
--         status is the workflow's after the script
local wf, node, st = KEYS[1], ARGV[1], ARGV[2]
local status = redis.call('HGET', wf, 'status')
if not status then return {'gone', ''} end
if redis.call('HEXISTS', wf, 'j:' .. node) == 0 then return {'unknown', status} end
if redis.call('HSETNX', wf, 'e:' .. node, st) == 0 then return {'noted', status} end
local ended = redis.call('HINCRBY', wf, 'ended', 1)
-- The node's place in the order of ends: the workflow's event stream uses it as the event's id.
redis.call('HSET', wf, 'n:' .. node, ended)
local notdone = tonumber(redis.call('HGET', wf, 'notdone') or '0')
if st ~= 'done' then notdone = redis.call('HINCRBY', wf, 'notdone', 1) end
local cancelled = redis.call('HGET', wf, 'cancelled') == '1'
local out = {'advanced', ''}
local children = redis.call('HGET', wf, 'c:' .. node) or ''
for child in string.gmatch(children, '[^,]+') do
  local p = redis.call('HINCRBY', wf, 'p:' .. child, -1)
  if st ~= 'done' then
    if redis.call('HINCRBY', wf, 'b:' .. child, 1) == 1 then
      redis.call('HSET', wf, 'why:' .. child, 'parent ' .. node .. ' ended ' .. st)
    end
  end
  if p == 0 and not cancelled then
    local action = 'release'
    if tonumber(redis.call('HGET', wf, 'b:' .. child) or '0') > 0 and redis.call('HGET', wf, 'pol:' .. child) ~= 'all_ended' then
      action = 'skip'
    end
    out[#out + 1] = child
    out[#out + 1] = redis.call('HGET', wf, 'j:' .. child)
    out[#out + 1] = action
    out[#out + 1] = redis.call('HGET', wf, 'why:' .. child) or ''
  end
end
if ended >= tonumber(redis.call('HGET', wf, 'nodes')) and status == 'running' then
  if cancelled then
    status = 'cancelled'
  elseif notdone > 0 then
    status = 'failed'
  else
    status = 'done'
  end
  redis.call('HSET', wf, 'status', status, 'finished_at', ARGV[3])
end
redis.call('PEXPIRE', wf, ARGV[4])
out[2] = status
return out
