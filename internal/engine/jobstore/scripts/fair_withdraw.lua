-- fair_withdraw: a job that waited in its key's list ended there (cancelled, expired): it leaves
-- its key's backlog now, not when its turn comes. Taking it out of the list would read the list
-- (O(n): a tenant cancelling 10,000 waiting jobs would scan 10,000 x 10,000 entries), so its id
-- goes into the withdrawn hash instead, and the admission passes over it (fair_pop in
-- fair_admit.lua), where it leaves the hash. A job admitted already is not withdrawn: its start
-- refuses it and its end frees its place, as before.
-- KEYS[1..13] the type's keys (fair_keys in fair_admit.lua)
-- ARGV[1..3] wait-list prefix, rate interval and tolerance ms, ARGV[4] the job's id, ARGV[5] its
-- key as its confirmed record names it ("": not known to have waited), ARGV[6] the hash's TTL ms (the records' retention:
-- an entry waits no longer than its record lives)
-- returns 1 when the job left its key's backlog, 0 when it was not waiting in a list this call
-- knows of (admitted, withdrawn already, or a node or replay not put in its list yet)
local FK = fair_keys(KEYS, ARGV)
local id = ARGV[4]
if redis.call('HEXISTS', FK.admitted, id) == 1 then return 0 end
-- A workflow node or a replay is in the once hash from its wait to its admission: that is its
-- key, and proof that it is in the list. Any other job is in the list from before its
-- confirmation until its admission (the caller names the key of a confirmed job only).
local key = redis.call('HGET', FK.once, id) or ARGV[5]
if key == '' then return 0 end
if redis.call('HSETNX', FK.withdrawn, id, key) == 0 then return 0 end
redis.call('PEXPIRE', FK.withdrawn, ARGV[6])
local backlog = tonumber(redis.call('ZINCRBY', FK.backlog, -1, key))
if backlog <= 0 then redis.call('ZREM', FK.backlog, key) end
return 1
