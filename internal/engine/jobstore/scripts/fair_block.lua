-- fair_block: an admitted job failed for good in a sequence that blocks on failure. Its key stays
-- held (the job keeps its admission and its key's running count, so the key's next jobs wait for an
-- operator's skip, which frees it through fair_done), but it no longer takes a place of the type's
-- capacity: other keys go on, and what the place allows is admitted now.
-- KEYS[1..13] as fair_done; ARGV[1..3] as fair_keys, ARGV[4] capacity, ARGV[5] per-key limit,
-- ARGV[6] most admissions, ARGV[7] virtual time's TTL ms, ARGV[8] the failed job's id
-- returns the jobs admitted, in order (see fair_admit)
local FK = fair_keys(KEYS, ARGV)
if redis.call('HEXISTS', FK.admitted, ARGV[8]) == 1 then redis.call('SADD', FK.blocked, ARGV[8]) end
return fair_admit(FK, tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7])
