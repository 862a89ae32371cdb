-- timeline: a job's status and its timeline from position n on (positions count every event pushed
-- since the job's creation, 0 first; see timeline_push), in one round trip.
-- KEYS[1] job record, KEYS[2] job timeline
-- ARGV[1] n, the first position wanted
-- returns {status or '', position of the first event returned, event JSON, ...}: the events from
--         position n, or from the oldest kept when n was trimmed away
local status = redis.call('HGET', KEYS[1], 'status') or ''
local first = 0
local oldest = redis.call('LINDEX', KEYS[2], 0)
if oldest then first = tonumber(string.match(oldest, '^{"seq":(%d+)') or '0') end
local from = math.max(0, tonumber(ARGV[1]) - first)
local out = {status, first + from}
for _, e in ipairs(redis.call('LRANGE', KEYS[2], from, -1)) do out[#out + 1] = e end
return out
