-- fair_wait: a job of a fairly dispatched type waits for its key (at the end of the key's list),
-- then the type admits what its capacity allows, this job or others (fair_admit.lua).
-- KEYS[1..8] the type's ready, backlog, running, admitted, weight, pass, vtime, once keys
-- ARGV[1] wait-list prefix (the key's list is ARGV[1] .. key), ARGV[2] key, ARGV[3] entry (job id,
-- \31, delivery data), ARGV[4] key's weight, ARGV[5] capacity, ARGV[6] per-key limit,
-- ARGV[7] most admissions, ARGV[8] virtual time's TTL ms, ARGV[9] "1": once (a workflow node's
-- wait, which a release decided twice may repeat: a job waiting or admitted already is not put in
-- its list again; the once hash holds it until its admission)
-- returns {entry, key, ...}: the jobs admitted, in order (see fair_admit)
local FK = fair_keys(KEYS, ARGV[1])
local key = ARGV[2]
local id = string.match(ARGV[3], '^[^\31]*')
local again = ARGV[9] == '1' and (redis.call('HEXISTS', FK.admitted, id) == 1 or redis.call('HSETNX', FK.once, id, key) == 0)
if not again then
  redis.call('RPUSH', FK.wait .. key, ARGV[3])
  redis.call('ZINCRBY', FK.backlog, 1, key)
  if tonumber(ARGV[4]) ~= 1 then redis.call('HSET', FK.weight, key, ARGV[4]) end
  fair_ready(FK, key, tonumber(ARGV[6]))
end
return fair_admit(FK, tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8])
