-- lease_start: the start of a lease-level run (a plain asynq task of a protected type). It refuses a
-- delivery that a rescue superseded, and a rescue's copy whose original was not superseded by it,
-- then takes the resource's lease and fence and marks the task running under the new owner.
-- KEYS[1] the resource's lease, KEYS[2] its fence counter, KEYS[3] this task's run marker,
-- KEYS[4] the run marker of the task this one continues (a rescue's copy), else KEYS[3] again
-- ARGV[1] owner, ARGV[2] lease TTL ms, ARGV[3] run marker TTL ms, ARGV[4] this task's id,
-- ARGV[5] 1 when this task is a rescue's copy, else 0, ARGV[6] the fence counter's TTL ms (0: none)
-- returns {"superseded", copy id}: a rescue gave the work to another task; acknowledge this one
--         {"stale_copy"}: a copy whose original was not superseded by it (a rescue that lost a race)
--         {"held", remaining ms}: another run holds the resource; nothing written
--         {"run", token}: the lease is taken, the marker says "running:<owner>"
local mine = redis.call('GET', KEYS[3])
if mine and string.sub(mine, 1, 11) == 'superseded:' then
  return {'superseded', string.sub(mine, 12)}
end
if ARGV[5] == '1' and redis.call('GET', KEYS[4]) ~= 'superseded:' .. ARGV[4] then
  return {'stale_copy'}
end
local ok, token = lease_acquire(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[6], 0)
if not ok then return {'held', token} end
redis.call('SET', KEYS[3], 'running:' .. ARGV[1], 'PX', ARGV[3])
return {'run', token}
