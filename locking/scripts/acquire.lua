-- acquire: take the lease on a resource and draw its next fencing token, atomically.
-- KEYS[1] lease key ({tag}:lock), KEYS[2] fence counter key ({tag}:fence)
-- ARGV[1] owner (fresh per acquisition), ARGV[2] lease TTL in ms,
-- ARGV[3] fence counter TTL in ms (0: the counter never expires)
-- returns {1, token} when acquired (or when this owner already holds it: a retried call must not
--         draw a second token), {0, remaining lease TTL in ms} when another owner holds it.
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('GET', KEYS[2]))}
end
if holder then
  return {0, redis.call('PTTL', KEYS[1])}
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if tonumber(ARGV[3]) > 0 then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return {1, token}
