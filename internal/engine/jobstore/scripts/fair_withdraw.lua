-- fair_withdraw: a job that waited in its key's list ended there (cancelled, expired): it leaves
-- its key's backlog now, not when its turn comes. Taking it out of the list would read the list
-- (O(n): a tenant cancelling 10,000 waiting jobs would scan 10,000 x 10,000 entries), so its id
-- goes into the withdrawn hash instead, and the admission passes over it (fair_pop in
-- fair_admit.lua), where it leaves both hashes. Only a job in a list is withdrawn: the once hash
-- holds every one, from its wait until it leaves the list. A job admitted already is not there
-- (its start refuses it and its end frees its place, as before), nor is one admitted, started and
-- freed before this call came.
-- KEYS[1..13] the type's keys (fair_keys in fair_admit.lua)
-- ARGV[1..3] wait-list prefix, rate interval and tolerance ms, ARGV[4] the job's id
-- returns 1 when the job left its key's backlog, 0 when it was in no list of this shard (or was
-- withdrawn already)
local FK = fair_keys(KEYS, ARGV)
local id = ARGV[4]
local key = redis.call('HGET', FK.once, id)
if not key then return 0 end
if redis.call('HSETNX', FK.withdrawn, id, key) == 0 then return 0 end
local backlog = tonumber(redis.call('ZINCRBY', FK.backlog, -1, key))
if backlog <= 0 then redis.call('ZREM', FK.backlog, key) end
return 1
