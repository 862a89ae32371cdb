-- fair_block: an admitted job failed for good in a sequence that blocks on failure. Its key stays
-- held (the job keeps its admission and its key's running count, so the key's next jobs wait for an
-- operator's skip, which frees it through fair_done), but it no longer takes a place of the type's
-- capacity: other keys go on, and what the place allows is admitted now.
-- KEYS[1..9] as fair_done; ARGV[1] wait-list prefix, ARGV[2] capacity, ARGV[3] per-key limit,
-- ARGV[4] most admissions, ARGV[5] virtual time's TTL ms, ARGV[6] the failed job's id
-- returns the jobs admitted, in order (see fair_admit)
local FK = fair_keys(KEYS, ARGV[1])
if redis.call('HEXISTS', FK.admitted, ARGV[6]) == 1 then redis.call('SADD', FK.blocked, ARGV[6]) end
return fair_admit(FK, tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5])
