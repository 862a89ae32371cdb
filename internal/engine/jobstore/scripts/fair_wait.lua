-- fair_wait: a job of a fairly dispatched type waits for its key (at the end of the key's list),
-- then the type admits what its capacity allows, this job or others (fair_admit.lua).
-- KEYS[1..13] the type's keys (fair_keys in fair_admit.lua), KEYS[14] (optional) the job's
-- record, sent by a wait that rides in its create's pipeline on one Redis node (CreateAndWait)
-- ARGV[1..3] wait-list prefix (the key's list is ARGV[1] .. key), rate interval and tolerance ms,
-- ARGV[4] key, ARGV[5] entry (job id, \31, delivery data), ARGV[6] key's weight, ARGV[7] capacity, ARGV[8] per-key limit,
-- ARGV[9] most admissions, ARGV[10] virtual time's TTL ms, ARGV[11] "1": once (a workflow node's
-- or a replay's wait; kept for callers, every wait is now done once)
-- returns {entry, key, ...}: the jobs admitted, in order (see fair_admit); -1 when KEYS[14] is
-- given and the record is not there: the create did not run before it (its script was missing and
-- is sent again after), and a job without its record must not wait (its admission would find
-- nothing to start), so the caller waits on its own once the create has answered.
if KEYS[14] and redis.call('EXISTS', KEYS[14]) == 0 then return -1 end
local FK = fair_keys(KEYS, ARGV)
local key = ARGV[4]
local id = string.match(ARGV[5], '^[^\31]*')
-- A job waiting or admitted already is not put in its list again: a release decided twice, a
-- replay raced, or a wait sent again by a client whose first reply was lost. Every job in a list
-- is in the once hash until it leaves the list (its admission, or the admission passing over it
-- withdrawn): what also tells a withdrawal that it is there.
local again = redis.call('HEXISTS', FK.admitted, id) == 1 or redis.call('HSETNX', FK.once, id, key) == 0
if not again then
  redis.call('RPUSH', FK.wait .. key, ARGV[5])
  redis.call('ZINCRBY', FK.backlog, 1, key)
  if tonumber(ARGV[6]) ~= 1 then redis.call('HSET', FK.weight, key, ARGV[6]) end
  fair_ready(FK, key, tonumber(ARGV[8]), nil, true)
end
return fair_admit(FK, tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), ARGV[10])
