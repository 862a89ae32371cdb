-- fair_pump: admit what the type's capacity allows (the sweep's backstop, and a capacity raised).
-- KEYS[1..13] the type's keys (fair_keys in fair_admit.lua)
-- ARGV[1..3] wait-list prefix, rate interval and tolerance ms, ARGV[4] capacity, ARGV[5] per-key
-- limit, ARGV[6] most admissions,
-- ARGV[7] virtual time's TTL ms
-- returns {entry, key, ...}: the jobs admitted, in order (see fair_admit)
local FK = fair_keys(KEYS, ARGV)
return fair_admit(FK, tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7])
