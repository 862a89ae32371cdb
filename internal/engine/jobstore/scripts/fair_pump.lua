-- fair_pump: admit what the type's capacity allows (the sweep's backstop, and a capacity raised).
-- KEYS[1..13] the type's keys (fair_keys in fair_admit.lua)
-- ARGV[1..3] wait-list prefix, rate interval and tolerance ms, ARGV[4] capacity, ARGV[5] per-key
-- limit, ARGV[6] most admissions,
-- ARGV[7] virtual time's TTL ms
-- returns {more, entry, key, ...}: more is 1 when the call's skips of withdrawn entries ran out
--         (call again: the key kept its turn), then the jobs admitted, in order (see fair_admit)
local FK = fair_keys(KEYS, ARGV)
local out = fair_admit(FK, tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7])
table.insert(out, 1, FK.skips >= fair_skips and 1 or 0)
return out
