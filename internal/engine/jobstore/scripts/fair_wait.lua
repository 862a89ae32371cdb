-- fair_wait: a job of a fairly dispatched type waits for its key (at the end of the key's list),
-- then the type admits what its capacity allows, this job or others (fair_admit.lua).
-- KEYS[1..7] the type's ready, backlog, running, admitted, weight, pass, vtime keys
-- ARGV[1] wait-list prefix (the key's list is ARGV[1] .. key), ARGV[2] key, ARGV[3] entry (job id,
-- \31, delivery data), ARGV[4] key's weight, ARGV[5] capacity, ARGV[6] per-key limit,
-- ARGV[7] most admissions, ARGV[8] virtual time's TTL ms
-- returns {entry, key, ...}: the jobs admitted, in order (see fair_admit)
local FK = fair_keys(KEYS, ARGV[1])
local key = ARGV[2]
redis.call('RPUSH', FK.wait .. key, ARGV[3])
redis.call('ZINCRBY', FK.backlog, 1, key)
if tonumber(ARGV[4]) ~= 1 then redis.call('HSET', FK.weight, key, ARGV[4]) end
fair_ready(FK, key, tonumber(ARGV[6]))
return fair_admit(FK, tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8])
