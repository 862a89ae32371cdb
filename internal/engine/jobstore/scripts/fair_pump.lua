-- fair_pump: admit what the type's capacity allows (the sweep's backstop, and a capacity raised).
-- KEYS[1..8] the type's ready, backlog, running, admitted, weight, pass, vtime, once keys
-- ARGV[1] wait-list prefix, ARGV[2] capacity, ARGV[3] per-key limit, ARGV[4] most admissions,
-- ARGV[5] virtual time's TTL ms
-- returns {entry, key, ...}: the jobs admitted, in order (see fair_admit)
local FK = fair_keys(KEYS, ARGV[1])
return fair_admit(FK, tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5])
