-- release: delete a lease, only for its owner (body on protocol.lua: lease_release).
-- KEYS[1] lease key
-- ARGV[1] owner
-- returns 1 when deleted, 0 when the lease is gone or held by another owner.
if lease_release(KEYS[1], ARGV[1]) then return 1 end
return 0
