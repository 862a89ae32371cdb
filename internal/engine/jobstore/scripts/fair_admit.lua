-- fair_admit: the admission layer's fragment (put before fair_wait, fair_done and fair_pump):
-- weighted round-robin over the keys of one task type, by stride scheduling. Every key with
-- waiting jobs and room under its per-key limit is in the ready set, scored by its pass; the
-- lowest pass is admitted next and its pass moves on by 1/weight, so under contention each key's
-- share of admissions follows its weight, and a key alone is admitted as long as the type has
-- capacity (work-conserving). A key that joins (or comes back) starts at the virtual time (the
-- pass of the last admission), so an idle key saves no credit and a newcomer waits at most one
-- round. Every key of a type shares one hash tag: the per-key lists are named from FK.wait ..
-- key, in the same slot as the keys the caller declared.
-- FK: {ready, backlog, running, admitted, weight, pass, vtime, once, blocked, wait}: see fair_keys below.
local function fair_keys(keys, wait_prefix)
  return {ready = keys[1], backlog = keys[2], running = keys[3], admitted = keys[4], weight = keys[5],
    pass = keys[6], vtime = keys[7], once = keys[8], blocked = keys[9], wait = wait_prefix}
end

-- fair_ready puts key in the ready set if it has waiting jobs and is under its limit (0: none).
local function fair_ready(FK, key, limit)
  if redis.call('ZSCORE', FK.ready, key) then return end
  if redis.call('LLEN', FK.wait .. key) == 0 then return end
  if limit > 0 and tonumber(redis.call('ZSCORE', FK.running, key) or '0') >= limit then return end
  local vt = tonumber(redis.call('GET', FK.vtime) or '0')
  local pass = tonumber(redis.call('HGET', FK.pass, key) or '0')
  redis.call('ZADD', FK.ready, math.max(pass, vt), key)
end

-- fair_forget drops what the type keeps of an idle key (nothing waiting, nothing admitted):
-- 50,000 keys that come and go leave nothing behind.
local function fair_forget(FK, key)
  if redis.call('LLEN', FK.wait .. key) == 0 and not redis.call('ZSCORE', FK.running, key) then
    redis.call('HDEL', FK.pass, key)
    redis.call('HDEL', FK.weight, key)
  end
end

-- fair_admit admits up to n waiting jobs while fewer than capacity (0: no bound) are admitted and
-- not ended (and not blocking their sequence); it returns {entry, key, entry, key, ...} in admission order. An entry is the job id,
-- then (after a \31) what its delivery carries, opaque here; the admitted hash keeps the key and
-- that, so the sweep can deliver again what a dispatcher that died did not.
local function fair_admit(FK, capacity, limit, n, ttl)
  local out = {}
  -- A job that blocks its sequence keeps its key (its running count) but no place of the capacity.
  local admitted = redis.call('HLEN', FK.admitted) - redis.call('SCARD', FK.blocked)
  while #out < 2 * n and (capacity == 0 or admitted < capacity) do
    local top = redis.call('ZRANGE', FK.ready, 0, 0, 'WITHSCORES')
    if #top == 0 then break end
    local key, pass = top[1], tonumber(top[2])
    redis.call('ZREM', FK.ready, key)
    local entry = redis.call('LPOP', FK.wait .. key)
    if entry then
      local id, data = string.match(entry, '^([^\31]*)(.*)$')
      redis.call('HSET', FK.admitted, id, key .. data)
      redis.call('HDEL', FK.once, id)
      admitted = admitted + 1
      redis.call('ZINCRBY', FK.running, 1, key)
      if tonumber(redis.call('ZINCRBY', FK.backlog, -1, key)) <= 0 then redis.call('ZREM', FK.backlog, key) end
      local weight = tonumber(redis.call('HGET', FK.weight, key) or '1')
      redis.call('SET', FK.vtime, pass, 'PX', ttl)
      redis.call('HSET', FK.pass, key, pass + 1 / weight)
      fair_ready(FK, key, limit)
      out[#out + 1] = entry
      out[#out + 1] = key
    end
  end
  return out
end
