-- limit_take: take a slot of a key's limit before a delivery starts: a counting semaphore whose
-- holders expire (a sorted set of owner -> expiry in Redis's clock, expired holders pruned here),
-- and a GCRA rate limit (the key's theoretical arrival time), in the key's own slot.
-- KEYS[1] holders (sorted set), KEYS[2] the key's fence counter, KEYS[3] theoretical arrival time
-- (unix ms in Redis's clock; also set by limit_release's push-back)
-- ARGV[1] owner (the delivery's lease owner), ARGV[2] slot TTL ms, ARGV[3] concurrency (0: none),
-- ARGV[4] emission interval ms (period / rate; 0: no rate limit), ARGV[5] burst tolerance ms
-- ((burst - 1) * interval), ARGV[6] TTL ms of the fence counter, ARGV[7] the longest wait ms the
-- caller takes for a start of the rate (it reserves that start and waits before it runs)
-- returns {"ok", token, holders, wait ms, at}: the slot is the owner's and its start is reserved
--         for at (unix ms, Redis's clock), wait ms from now (a retried call by the same owner
--         gets the same token, nothing drawn or reserved again, wait 0); token 0 when there is no
--         concurrency limit;
--         {"full", ms until the earliest holder expires, holders}: no slot, nothing written but the prune;
--         {"rate", ms until a start conforms}: over the rate (or pushed back) by more than the
--         caller waits, nothing written.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local owner, ttl, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local interval, tau = tonumber(ARGV[4]), tonumber(ARGV[5])

local held = 0
if n > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  if redis.call('ZSCORE', KEYS[1], owner) then
    redis.call('ZADD', KEYS[1], now + ttl, owner)
    return {'ok', tonumber(redis.call('GET', KEYS[2]) or '0'), redis.call('ZCARD', KEYS[1]), 0, now}
  end
  held = redis.call('ZCARD', KEYS[1])
  if held >= n then
    local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    return {'full', math.max(0, tonumber(first[2]) - now), held}
  end
end

local tat = tonumber(redis.call('GET', KEYS[3]) or '0')
local wait = math.max(0, tat - tau - now)
if wait > tonumber(ARGV[7]) or (wait > 0 and interval == 0) then return {'rate', wait} end
if interval > 0 then
  local next_tat = math.max(tat, now) + interval
  redis.call('SET', KEYS[3], string.format('%d', next_tat), 'PX', next_tat - now + 1000)
end

local token = 0
if n > 0 then
  token = fence_next(KEYS[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
  redis.call('ZADD', KEYS[1], now + ttl, owner)
  if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
  held = held + 1
end
return {'ok', token, held, wait, now + wait}
