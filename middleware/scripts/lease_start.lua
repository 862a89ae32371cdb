-- lease_start: the start of a lease-level run (a plain asynq task of a protected type). It refuses a
-- delivery that a rescue superseded, and a rescue's copy whose original was not handed to it, then
-- takes the resource's lease and fence and marks the task running under the new owner. A copy that
-- comes before its rescuer's commit (the rescuer paused between its enqueue and its commit) takes the
-- original over itself when the original's run is lost, as the commit would have, or when the
-- original never started and is marked "adopting:<this copy>" (lease_rescue.lua). A task marked
-- adopting by a copy runs when it starts first.
-- KEYS[1] the resource's lease, KEYS[2] its fence counter, KEYS[3] this task's run marker,
-- KEYS[4] the run marker of the task this one continues (a rescue's copy), else KEYS[3] again
-- ARGV[1] owner, ARGV[2] lease TTL ms, ARGV[3] run marker TTL ms, ARGV[4] this task's id,
-- ARGV[5] 1 when this task is a rescue's copy, else 0, ARGV[6] the fence counter's TTL ms (0: none),
-- ARGV[7] a superseded marker's TTL ms
-- returns {"superseded", copy id}: a rescue gave the work to another task; acknowledge this one
--         {"stale_copy"}: a copy whose original ended or went to another copy
--         {"held", remaining ms}: another run holds the resource (or the original's run is alive);
--                                nothing written
--         {"run", token}: the lease is taken, the marker says "running:<owner>"
local mine = redis.call('GET', KEYS[3])
if mine and string.sub(mine, 1, 11) == 'superseded:' then
  return {'superseded', string.sub(mine, 12)}
end
if ARGV[5] == '1' then
  local original = redis.call('GET', KEYS[4])
  if original == 'adopting:' .. ARGV[4] then
    -- The copy of a task that never started, before its rescuer's last step: it takes the task.
    redis.call('SET', KEYS[4], 'superseded:' .. ARGV[4], 'PX', ARGV[7])
  elseif original ~= 'superseded:' .. ARGV[4] then
    if not original or string.sub(original, 1, 8) ~= 'running:' then return {'stale_copy'} end
    if lease_holder(KEYS[1]) == string.sub(original, 9) then
      return {'held', redis.call('PTTL', KEYS[1])}
    end
    redis.call('SET', KEYS[4], 'superseded:' .. ARGV[4], 'PX', ARGV[7])
  end
end
local ok, token = lease_acquire(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[6], 0)
if not ok then return {'held', token} end
redis.call('SET', KEYS[3], 'running:' .. ARGV[1], 'PX', ARGV[3])
return {'run', token}
