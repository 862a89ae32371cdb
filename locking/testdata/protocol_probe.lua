-- protocol_probe (tests only; a body on protocol.lua): call one protocol function, report its returns.
-- KEYS[1..] the function's key arguments, in order
-- ARGV[1] the function's name, ARGV[2..] its other arguments, in order
-- returns every value the function returned, as a string: "true", "false", "nil" or the value.
local fns = {
  lease_acquire = lease_acquire, lease_renew = lease_renew, lease_release = lease_release,
  lease_holder = lease_holder, heartbeat_stamp = heartbeat_stamp, fence_last = fence_last,
  fence_seen = fence_seen, fence_check = fence_check, fence_record = fence_record,
  fence_seal = fence_seal, fence_sealed = fence_sealed, fence_next = fence_next,
}
local fn = fns[ARGV[1]]
if not fn then return redis.error_reply('no protocol function ' .. tostring(ARGV[1])) end
local args = {}
for i = 1, #KEYS do args[#args + 1] = KEYS[i] end
for i = 2, #ARGV do args[#args + 1] = ARGV[i] end
local function pack(...) return select('#', ...), {...} end
local n, res = pack(fn(unpack(args)))
local out = {}
for i = 1, n do out[i] = tostring(res[i]) end
return out
