-- timeline: a job's status and its timeline from position n on (positions count every event pushed
-- since the job's creation, 0 first; see timeline_push), in one round trip.
-- KEYS[1] job record, KEYS[2] job timeline
-- ARGV[1] n, the first position wanted, ARGV[2..] the record's fields the events it stands for are
-- rebuilt from (jobstore/fold.go's foldedFields, timeline_folded first)
-- returns {status or '', position of the first stored event returned, the value of each field of
--         ARGV[2..] ('' when absent; derived ones as record_get derives them), event JSON, ...}:
--         the stored events from position n, or from the oldest kept when n was trimmed away
local fields = {'status', unpack(ARGV, 2)}
local got = record_get(KEYS[1], fields)
local first = 0
local oldest = redis.call('LINDEX', KEYS[2], 0)
if oldest then
  first = tonumber(string.match(oldest, '^{"seq":(%d+)') or '0')
else
  first = (timeline_implied(KEYS[1])) -- an empty list goes on after what the record stands for
end
-- A far index (a capped list is short) is not sent: Lua would write it as 1e+17, which LRANGE refuses.
local from = math.min(math.max(0, tonumber(ARGV[1]) - first), 2147483647)
local out = {got.status or '', first + from}
for i = 2, #fields do out[#out + 1] = got[fields[i]] or '' end
for _, e in ipairs(redis.call('LRANGE', KEYS[2], from, -1)) do out[#out + 1] = e end
return out
