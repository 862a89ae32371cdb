-- fenced_set (body; runs after fence_prelude.lua): replace a whole string value.
-- KEYS[1] the fence record of the target, KEYS[2] the target string
-- ARGV[3] TTL in ms (0: no expiry), ARGV[4] value
-- returns 1
if tonumber(ARGV[3]) > 0 then
  redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
else
  redis.call('SET', KEYS[2], ARGV[4])
  redis.call('PERSIST', KEYS[1])
end
return 1
