-- lease_finish: the end of a lease-level run: release the lease if this owner still holds it, and
-- forget the run marker if it is still this run's (a superseded marker stays, so asynq's later
-- redelivery of the task is acknowledged without running).
-- KEYS[1] the resource's lease, KEYS[2] this task's run marker
-- ARGV[1] owner
-- returns {released (0|1), superseded (0|1)}
local released = lease_release(KEYS[1], ARGV[1]) and 1 or 0
local marker = redis.call('GET', KEYS[2])
if marker == 'running:' .. ARGV[1] then
  redis.call('DEL', KEYS[2])
end
local superseded = (marker and string.sub(marker, 1, 11) == 'superseded:') and 1 or 0
return {released, superseded}
