-- fair_admit: the admission layer's fragment (put before fair_wait, fair_done and fair_pump):
-- weighted round-robin over the keys of one task type, by stride scheduling. Every key with
-- waiting jobs and room under its per-key limit is in the ready set, scored by its pass; the
-- lowest pass is admitted next and its pass moves on by 1/weight, so under contention each key's
-- share of admissions follows its weight, and a key alone is admitted as long as the type has
-- capacity (work-conserving). A key that joins (or comes back) starts at the virtual time (the
-- pass of the last admission), so an idle key saves no credit and a newcomer waits at most one
-- round. Every key of a type shares one hash tag: the per-key lists are named from FK.wait ..
-- key, in the same slot as the keys the caller declared.
-- A type with a rate limit (interval > 0) also spaces each key's admissions by its rate (GCRA, Redis's
-- clock, tolerance = (burst - 1) x interval): a key whose next token is not due is parked (out of the
-- ready set, in the parked set scored by when it is due) instead of admitted, so its job waits here and
-- never bounces through asynq to wait; every call of these scripts readies the parked keys that are due.
-- FK: {ready, backlog, running, admitted, weight, pass, vtime, once, blocked, rate, parked,
-- withdrawn, wait, interval, tolerance}: see fair_keys below (KEYS[12] is the live handlers' count:
-- see fair_admit; KEYS[13] the withdrawn hash: see fair_withdraw.lua).
-- Every script's ARGV starts with the wait-list prefix, the rate's interval ms (0: no rate) and its
-- tolerance ms. FK also caches what a call reads once (vt, nblocked, has_*: false
-- until read), declared here so the table is built at its full size: one that grows past 16 fields
-- is rehashed, about 3,000 instructions a call (make bench-scripts).
local function fair_keys(keys, argv)
  return {ready = keys[1], backlog = keys[2], running = keys[3], admitted = keys[4], weight = keys[5],
    pass = keys[6], vtime = keys[7], once = keys[8], blocked = keys[9], rate = keys[10], parked = keys[11],
    withdrawn = keys[13], wait = argv[1], interval = tonumber(argv[2]), tolerance = tonumber(argv[3]),
    vt = false, nblocked = false, has_weight = false, has_withdrawn = false, skips = 0}
end

-- fair_now is Redis's clock in ms (the rate's, whoever calls).
local function fair_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- fair_vtime is the virtual time, read once a call: only fair_admit's end moves it, after every
-- read of the call.
local function fair_vtime(FK)
  if not FK.vt then FK.vt = tonumber(redis.call('GET', FK.vtime) or '0') end
  return FK.vt
end

-- fair_blocked is how many admitted jobs block their sequence, read once a call (SCARD answers 0
-- for a set that does not exist: most types never have one); fair_done counts its removals off it.
local function fair_blocked(FK)
  if not FK.nblocked then FK.nblocked = redis.call('SCARD', FK.blocked) end
  return FK.nblocked
end

-- fair_ready puts key in the ready set if it has waiting jobs and is under its limit (0: none).
-- running is key's admitted count when the caller holds it (nil: read it); waiting says the caller
-- knows key has waiting jobs. A key that joins starts at the virtual time (fair_vtime).
local function fair_ready(FK, key, limit, running, waiting)
  if redis.call('ZSCORE', FK.ready, key) then return end
  if FK.interval > 0 and redis.call('ZSCORE', FK.parked, key) then return end -- readied when due
  if not waiting and redis.call('LLEN', FK.wait .. key) == 0 then return end
  if limit > 0 and (running or tonumber(redis.call('ZSCORE', FK.running, key) or '0')) >= limit then return end
  local pass = tonumber(redis.call('HGET', FK.pass, key) or '0')
  redis.call('ZADD', FK.ready, math.max(pass, fair_vtime(FK)), key)
end

-- fair_has says whether FK's hash name (weight, withdrawn) exists, read once a call: most types
-- have no weights and no job withdrawn, and a job's admission and end skip their writes to those
-- then. Within a call only removals follow the read (a wait's weight is written before its
-- admission reads it).
local function fair_has(FK, name)
  local k = 'has_' .. name
  if not FK[k] then FK[k] = redis.call('EXISTS', FK[name]) end -- 0 or 1: read (false: not yet)
  return FK[k] == 1
end

-- fair_forget drops what the type keeps of an idle key (nothing waiting, nothing admitted):
-- 50,000 keys that come and go leave nothing behind.
local function fair_forget(FK, key)
  redis.call('HDEL', FK.pass, key)
  if fair_has(FK, 'weight') then redis.call('HDEL', FK.weight, key) end
end

-- fair_pop takes the next entry of key's list, passing over the withdrawn ones (cancelled or
-- expired while they waited: fair_withdraw.lua took them off the backlog then, so they leave the
-- list here without counting), at most fair_skips in a call (a short script after 10,000 cancels:
-- the next call goes on). It returns the entry (false: none to take now) and whether the call's
-- skips ran out with entries left.
local fair_skips = 1024
local function fair_pop(FK, key)
  local entry = redis.call('LPOP', FK.wait .. key)
  if not entry or not fair_has(FK, 'withdrawn') then return entry, false end
  while entry do
    local id = string.match(entry, '^[^\31]*')
    if redis.call('HDEL', FK.withdrawn, id) == 0 then return entry, false end
    redis.call('HDEL', FK.once, id)
    FK.skips = FK.skips + 1
    if FK.skips >= fair_skips then return false, redis.call('LLEN', FK.wait .. key) > 0 end
    entry = redis.call('LPOP', FK.wait .. key)
  end
  return false, false
end

-- fair_unpark readies the parked keys whose next token is due, at most 1,024 a call (a short script
-- whatever the number of keys; the rest are readied by the next call, which the pump makes at once).
local function fair_unpark(FK, limit, now)
  for _, key in ipairs(redis.call('ZRANGEBYSCORE', FK.parked, '-inf', now, 'LIMIT', 0, 1024)) do
    redis.call('ZREM', FK.parked, key)
    fair_ready(FK, key, limit)
  end
end

-- fair_take_token takes key's next token of the rate, or parks key until it is due (false). A
-- token at or before now says nothing a missing one does not: the rate set keeps only the others.
local function fair_take_token(FK, key, now, ttl)
  local tat = tonumber(redis.call('ZSCORE', FK.rate, key) or '0')
  if tat - FK.tolerance > now then
    redis.call('ZADD', FK.parked, tat - FK.tolerance, key)
    redis.call('PEXPIRE', FK.parked, ttl)
    return false
  end
  redis.call('ZREMRANGEBYSCORE', FK.rate, '-inf', now)
  redis.call('ZADD', FK.rate, math.max(tat, now) + FK.interval, key)
  redis.call('PEXPIRE', FK.rate, ttl)
  return true
end

-- fair_admit admits up to n waiting jobs while fewer than capacity (0: no bound; negative, -fallback:
-- the handlers of the live asynq servers that serve the type, as a sweep last counted them for this
-- shard (fair_capacity.go), or the fallback when no count is fresh) are admitted and not ended (and
-- not blocking their sequence); it returns {entry, key, entry, key, ...} in admission order. An entry is the job id,
-- then (after a \31) what its delivery carries, opaque here; the admitted hash keeps the key and
-- that, so the sweep can deliver again what a dispatcher that died did not.
local function fair_admit(FK, capacity, limit, n, ttl)
  -- KEYS[12], the live handlers' count, is read here only (not a field of FK, built for every call).
  if capacity < 0 then capacity = tonumber(redis.call('GET', KEYS[12]) or -capacity) end
  local out = {}
  -- A job that blocks its sequence keeps its key (its running count) but no place of the capacity.
  local admitted = redis.call('HLEN', FK.admitted) - fair_blocked(FK)
  local now = 0
  if FK.interval > 0 then
    now = fair_now()
    fair_unpark(FK, limit, now)
  end
  local vtime = nil
  while #out < 2 * n and (capacity == 0 or admitted < capacity) do
    local top = redis.call('ZPOPMIN', FK.ready)
    if #top == 0 then break end
    local key, pass = top[1], tonumber(top[2])
    local entry = false
    if FK.interval == 0 or fair_take_token(FK, key, now, ttl) then
      local more
      entry, more = fair_pop(FK, key)
      if more then
        -- The call's skips ran out: the key keeps its turn, and the next call goes on.
        redis.call('ZADD', FK.ready, pass, key)
        break
      elseif not entry and not redis.call('ZSCORE', FK.running, key) then
        fair_forget(FK, key) -- every entry left was withdrawn: the key is idle
      end
    end
    if entry then
      local id, data = string.match(entry, '^([^\31]*)(.*)$')
      redis.call('HSET', FK.admitted, id, key .. data)
      redis.call('HDEL', FK.once, id)
      admitted = admitted + 1
      local running = tonumber(redis.call('ZINCRBY', FK.running, 1, key))
      -- The backlog counts the key's list less its withdrawn entries (one RPUSH, one increment;
      -- one LPOP, one decrement; a withdrawal decrements, its entry's LPOP does not).
      local backlog = tonumber(redis.call('ZINCRBY', FK.backlog, -1, key))
      if backlog <= 0 then redis.call('ZREM', FK.backlog, key) end
      local weight = 1
      if fair_has(FK, 'weight') then weight = tonumber(redis.call('HGET', FK.weight, key) or '1') end
      vtime = pass
      local next_pass = pass + 1 / weight
      redis.call('HSET', FK.pass, key, next_pass)
      -- Ready again while it has jobs waiting and room under its limit: the key was popped (not
      -- ready, not parked) and its next pass is past the virtual time, so that is its score.
      if (limit == 0 or running < limit) and backlog > 0 then
        redis.call('ZADD', FK.ready, next_pass, key)
      end
      out[#out + 1] = entry
      out[#out + 1] = key
    end
  end
  -- The virtual time is the last admission's pass (the highest: the lowest pass goes first), set
  -- once a call.
  if vtime then redis.call('SET', FK.vtime, vtime, 'PX', ttl) end
  return out
end
