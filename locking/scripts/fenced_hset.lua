-- fenced_hset (body; runs after fence_prelude.lua): set fields of a hash target.
-- KEYS[1] the target hash (it is its own fence record)
-- ARGV[3] TTL in ms (0: no expiry, an existing one is removed), ARGV[4..] field, value, ...
-- returns 1
redis.call('HSET', KEYS[1], unpack(ARGV, 4))
if tonumber(ARGV[3]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
else
  redis.call('PERSIST', KEYS[1])
end
return 1
