-- fair_done: admitted jobs ended (or will never run): each one's key's running count goes down,
-- the key is ready again if it has waiting jobs, and the type admits what the freed capacity
-- allows. Several ends in one call: a process frees the ends of its handlers in batches.
-- Told twice (the ending process and the sweep), a job frees once: only an admitted job frees.
-- KEYS[1..9] the type's ready, backlog, running, admitted, weight, pass, vtime, once, blocked keys
-- ARGV[1] wait-list prefix, ARGV[2] capacity, ARGV[3] per-key limit, ARGV[4] most admissions,
-- ARGV[5] virtual time's TTL ms, ARGV[6..] the ended jobs' ids
-- returns {freed, entry, key, ...}: how many of the ids this call freed, then the jobs admitted,
-- in order (see fair_admit)
local FK = fair_keys(KEYS, ARGV[1])
local limit = tonumber(ARGV[3])
local freed = 0
for i = 6, #ARGV do
  local held = redis.call('HGET', FK.admitted, ARGV[i])
  if held then
    local key = string.match(held, '^[^\31]*')
    redis.call('HDEL', FK.admitted, ARGV[i])
    redis.call('SREM', FK.blocked, ARGV[i])
    if tonumber(redis.call('ZINCRBY', FK.running, -1, key)) <= 0 then redis.call('ZREM', FK.running, key) end
    fair_ready(FK, key, limit)
    fair_forget(FK, key)
    freed = freed + 1
  end
end
-- Each freed place may admit one: a batch of ends admits as many as it freed, at least the batch.
local out = fair_admit(FK, tonumber(ARGV[2]), limit, math.max(tonumber(ARGV[4]), freed), ARGV[5])
table.insert(out, 1, freed)
return out
