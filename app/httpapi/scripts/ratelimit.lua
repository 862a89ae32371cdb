-- ratelimit: one request against a GCRA limit (a token bucket kept as one timestamp), on Redis's
-- clock so that every API process shares one time. The key holds the theoretical arrival time
-- (TAT): the instant the bucket is full again. It expires then, since a missing key means full.
-- KEYS[1] the limiter key (string: TAT, unix µs)
-- ARGV[1] emission interval, µs between requests at the sustained rate (1e6 / rate)
-- ARGV[2] burst: requests a full bucket admits at once
-- returns {allowed (1 or 0), remaining (requests still admitted now), retry_after_us (0 when
--         allowed: when this request would be admitted), reset_us (until the bucket is full)}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tau = interval * tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now) or now
if tat < now then tat = now end
local new_tat = tat + interval
local allow_at = new_tat - tau
if now < allow_at then
  return {0, 0, allow_at - now, tat - now}
end
-- %d: a plain integer, never the exponent form a large Lua number would be turned into.
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', math.ceil((new_tat - now) / 1000))
return {1, math.floor((now - allow_at) / interval), 0, new_tat - now}
