-- fair_done: admitted jobs ended (or will never run): each one's key's running count goes down,
-- the key is ready again if it has waiting jobs, and the type admits what the freed capacity
-- allows. Several ends in one call: a process frees the ends of its handlers in batches.
-- Told twice (the ending process and the sweep), a job frees once: only an admitted job frees.
-- KEYS[1..13] the type's keys (fair_keys in fair_admit.lua)
-- ARGV[1..3] wait-list prefix, rate interval and tolerance ms, ARGV[4] capacity, ARGV[5] per-key
-- limit, ARGV[6] most admissions,
-- ARGV[7] virtual time's TTL ms, ARGV[8..] the ended jobs' ids
-- KEYS[14] (optional) the one ended job's record, sent by a done that rides in its finish's
-- pipeline on one Redis node (FinishArgs.FairDone): ARGV[8] and ARGV[9] are then the status and
-- finished_at (unix ms) that finish writes, and ARGV[10] the job's id. It frees nothing unless the
-- record holds both, which that finish alone writes: a finish refused (a newer run owns the job,
-- which frees its admission at its own end; a replay of the failed job holds a new admission) or
-- not run yet (its script was missing, sent again after this) leaves it to the caller's other path.
-- returns {freed, entry, key, ...}: how many of the ids this call freed, then the jobs admitted,
-- in order (see fair_admit)
local first = 8
if KEYS[14] then
  local rec = redis.call('HMGET', KEYS[14], 'status', 'finished_at')
  if rec[1] ~= ARGV[8] or rec[2] ~= ARGV[9] then return {0} end
  first = 10
end
local FK = fair_keys(KEYS, ARGV)
local limit = tonumber(ARGV[5])
local freed = 0
for i = first, #ARGV do
  local held = redis.call('HGET', FK.admitted, ARGV[i])
  if held then
    local key = string.match(held, '^[^\31]*')
    redis.call('HDEL', FK.admitted, ARGV[i])
    if fair_blocked(FK) > 0 then FK.nblocked = FK.nblocked - redis.call('SREM', FK.blocked, ARGV[i]) end
    local running = tonumber(redis.call('ZINCRBY', FK.running, -1, key))
    if running <= 0 then redis.call('ZREM', FK.running, key) end
    if redis.call('LLEN', FK.wait .. key) > 0 then
      fair_ready(FK, key, limit, math.max(running, 0), true)
    elseif running <= 0 then
      fair_forget(FK, key)
    end
    freed = freed + 1
  end
end
-- Each freed place may admit one: a batch of ends admits as many as it freed, at least the batch.
local out = fair_admit(FK, tonumber(ARGV[4]), limit, math.max(tonumber(ARGV[6]), freed), ARGV[7])
table.insert(out, 1, freed)
return out
