-- limit_release: give back a slot of a key's limit, and push the key's next starts back (an
-- upstream's 429). Sent in the finish script's round trip.
-- KEYS[1] holders (sorted set), KEYS[2] theoretical arrival time (unix ms in Redis's clock)
-- ARGV[1] owner, ARGV[2] push-back ms (0: none): no start of the key conforms before now + push-back,
-- ARGV[3] burst tolerance ms of the key's rate (0 without one)
-- returns {released (1 when the owner held a slot), held after the release}
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
local push = tonumber(ARGV[2])
if push > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local tat = now + push + tonumber(ARGV[3])
  if tat > tonumber(redis.call('GET', KEYS[2]) or '0') then
    redis.call('SET', KEYS[2], string.format('%d', tat), 'PX', tat - now + 1000)
  end
end
return {removed, redis.call('ZCARD', KEYS[1])}
