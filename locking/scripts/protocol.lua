-- protocol: the lease and fence protocol, once. Every locking script, and every script built with
-- NewProtocolScript or NewFencedScript, starts with this fragment; the body that follows calls these
-- local functions with its own KEYS[1].. and ARGV values (the fragment reads no KEYS or ARGV itself).
-- Tokens and TTLs may be numbers or numeric strings; all keys passed must share one hash tag.
--
-- lease_acquire(lease_key, fence_key, owner, ttl_ms, fence_ttl_ms, floor)
--   Take the lease (SET owner PX ttl_ms) and draw the next fencing token (INCR fence_key).
--   fence_ttl_ms: 0 leaves the counter's TTL alone (none for long-lived resources), > 0 sets it.
--   floor: 0 (or nil), or the highest token a record of the resource has seen: the drawn token is
--   then > floor even when the counter expired or was lost.
--   returns true, token, true   acquired, token freshly drawn;
--           true, token, false  this owner already held it (a retried call): TTL refreshed, the
--                               current counter returned, no second token drawn;
--           false, remaining_ms another owner holds it; nothing written.
-- lease_renew(lease_key, owner, ttl_ms)
--   returns true when owner holds the lease (its TTL is set to ttl_ms), false otherwise (nothing written).
-- lease_release(lease_key, owner)
--   returns true when owner held the lease and it was deleted, false otherwise (nothing written).
-- lease_holder(lease_key)
--   returns the owner holding the lease, or false when it is free.
-- heartbeat_stamp(hash_key, field, now_ms)
--   Sets field of the hash to now_ms if the hash exists (never creates it).
--   returns true when stamped, false when the hash does not exist.
-- fence_last(fence_key)
--   returns the last token drawn from the counter, 0 when none was (or the counter was lost).
-- fence_next(fence_key)
--   Draws the next token from the counter (a semaphore's slot, say, which holds no lease).
--   returns the token.
-- fence_raise(fence_key, floor)
--   Lifts the counter to at least floor (a token a store outside Redis has seen), so the next
--   token drawn is above it. returns the counter after the call.
-- fence_seen(record_key)
--   returns the highest token that wrote the fence record (a hash), 0 when none did. Pass it as
--   lease_acquire's floor when the record outlives the counter.
-- fence_check(record_key, token, owner)
--   returns nil when the fence may write the record (no token yet, a lower one, or the same token
--           and owner again), else the record's current token: a higher token, or the same token
--           from another owner, wrote it. Writes nothing.
-- fence_record(record_key, token, owner)
--   Stores token and owner in the record's fence fields (call after fence_check said nil).
--   returns nothing.
-- fence_seal(record_key)
--   Forgets the owner of the record's fence, keeping its token: from then on fence_check refuses
--   every token up to and including that one, whoever sends it (a record whose last writer is done
--   with it: a job ended for good). returns nothing.
-- fence_sealed(record_key)
--   returns true when the record's fence has a token and no owner (fence_seal), false otherwise.
-- The record's fence fields are _fence_token and _fence_owner (locking.FieldFenceToken,
-- locking.FieldFenceOwner); no script outside this fragment names them.

local function lease_acquire(lease_key, fence_key, owner, ttl_ms, fence_ttl_ms, floor)
  local holder = redis.call('GET', lease_key)
  if holder == owner then
    redis.call('PEXPIRE', lease_key, ttl_ms)
    return true, tonumber(redis.call('GET', fence_key)), false
  end
  if holder then
    return false, redis.call('PTTL', lease_key)
  end
  local token = redis.call('INCR', fence_key)
  floor = tonumber(floor) or 0
  if token <= floor then
    -- INCRBY, not SET: a counter that still exists keeps its TTL, as INCR does.
    token = redis.call('INCRBY', fence_key, floor + 1 - token)
  end
  redis.call('SET', lease_key, owner, 'PX', ttl_ms)
  if (tonumber(fence_ttl_ms) or 0) > 0 then
    redis.call('PEXPIRE', fence_key, fence_ttl_ms)
  end
  return true, token, true
end

local function lease_renew(lease_key, owner, ttl_ms)
  if redis.call('GET', lease_key) ~= owner then return false end
  redis.call('PEXPIRE', lease_key, ttl_ms)
  return true
end

local function lease_release(lease_key, owner)
  if redis.call('GET', lease_key) ~= owner then return false end
  redis.call('DEL', lease_key)
  return true
end

local function lease_holder(lease_key)
  return redis.call('GET', lease_key)
end

local function heartbeat_stamp(hash_key, field, now_ms)
  if redis.call('EXISTS', hash_key) == 0 then return false end
  redis.call('HSET', hash_key, field, now_ms)
  return true
end

local function fence_last(fence_key)
  return tonumber(redis.call('GET', fence_key)) or 0
end

local function fence_next(fence_key)
  return redis.call('INCR', fence_key)
end

local function fence_raise(fence_key, floor)
  local last = fence_last(fence_key)
  floor = tonumber(floor) or 0
  if last < floor then
    -- INCRBY, not SET: a counter that exists keeps its TTL.
    return redis.call('INCRBY', fence_key, floor - last)
  end
  return last
end

local function fence_seen(record_key)
  return tonumber(redis.call('HGET', record_key, '_fence_token')) or 0
end

local function fence_check(record_key, token, owner)
  local cur = redis.call('HMGET', record_key, '_fence_token', '_fence_owner')
  local cur_token = tonumber(cur[1])
  token = tonumber(token)
  if cur_token and (token < cur_token or (token == cur_token and cur[2] ~= owner)) then
    return cur_token
  end
  return nil
end

local function fence_record(record_key, token, owner)
  -- %d: a Lua number past 1e14 would otherwise be written in exponent form.
  redis.call('HSET', record_key, '_fence_token', string.format('%d', tonumber(token)), '_fence_owner', owner)
end

local function fence_seal(record_key)
  redis.call('HDEL', record_key, '_fence_owner')
end

local function fence_sealed(record_key)
  local cur = redis.call('HMGET', record_key, '_fence_token', '_fence_owner')
  return cur[1] ~= false and cur[2] == false
end
