-- effect: the frame of every Effect (engine.NewEffect): a side effect applied at most once per
-- operation key. It runs after locking's fence prelude (a stale token never gets here); the
-- effect's body takes the place of the EFFECT_BODY line, inside a function, so its return value is
-- the script's.
-- KEYS[1] the target's fence record (a hash), KEYS[2] the applied-operation record, KEYS[3..#KEYS-2]
-- the body's own keys, KEYS[#KEYS-1] the job record (the frame's: the body does not use it),
-- KEYS[#KEYS] the resource's fence counter (the prelude's)
-- ARGV[1] token, ARGV[2] owner (the fence prelude's), ARGV[3] job id, ARGV[4] applied record TTL ms
-- (0: kept for ever), ARGV[5..] the body's own arguments
-- returns the body's return value; an error reply "APPLIED <job id>" and nothing written when the
--         operation was applied before; "STALE <token>" and nothing written but the target's fence
--         fields when the job record's fence is higher than the run's (a cancel, or a later run,
--         raised it)
do
  local current = fence_check(KEYS[#KEYS - 1], ARGV[1], ARGV[2])
  if current then return redis.error_reply('STALE ' .. current) end
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return redis.error_reply('APPLIED ' .. redis.call('GET', KEYS[2]))
end
local function effect()
-- EFFECT_BODY
end
local result = effect()
if tonumber(ARGV[4]) > 0 then
  redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
else
  redis.call('SET', KEYS[2], ARGV[3])
end
return result
