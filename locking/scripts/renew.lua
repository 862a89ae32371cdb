-- renew: extend a lease, only for its owner, and stamp its heartbeat (body on protocol.lua:
-- lease_renew, heartbeat_stamp).
-- KEYS[1] lease key, KEYS[2] heartbeat hash (optional: same slot, e.g. the job record)
-- ARGV[1] owner, ARGV[2] lease TTL in ms, ARGV[3] heartbeat field, ARGV[4] now (unix ms)
-- returns 1 when extended, 0 when the lease is gone or held by another owner.
if not lease_renew(KEYS[1], ARGV[1], ARGV[2]) then return 0 end
if KEYS[2] then heartbeat_stamp(KEYS[2], ARGV[3], ARGV[4]) end
return 1
