-- fair_done: an admitted job ended (or will never run): its key's running count goes down, the
-- key is ready again if it has waiting jobs, and the type admits what the freed capacity allows.
-- Told twice (the ending process and the sweep), it frees once: only an admitted job frees.
-- KEYS[1..7] the type's ready, backlog, running, admitted, weight, pass, vtime keys
-- ARGV[1] wait-list prefix, ARGV[2] job id, ARGV[3] capacity, ARGV[4] per-key limit,
-- ARGV[5] most admissions, ARGV[6] virtual time's TTL ms
-- returns {freed (1 or 0), entry, key, ...}: the jobs admitted, in order (see fair_admit)
local FK = fair_keys(KEYS, ARGV[1])
local limit = tonumber(ARGV[4])
local held = redis.call('HGET', FK.admitted, ARGV[2])
local freed = 0
if held then
  local key = string.match(held, '^[^\31]*')
  redis.call('HDEL', FK.admitted, ARGV[2])
  if tonumber(redis.call('ZINCRBY', FK.running, -1, key)) <= 0 then redis.call('ZREM', FK.running, key) end
  fair_ready(FK, key, limit)
  fair_forget(FK, key)
  freed = 1
end
local out = fair_admit(FK, tonumber(ARGV[3]), limit, tonumber(ARGV[5]), ARGV[6])
table.insert(out, 1, freed)
return out
