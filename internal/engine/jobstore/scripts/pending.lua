-- pending: has the job a dedup marker named while its enqueue was in flight been confirmed since?
-- KEYS[1] the marker's pending flag, KEYS[2] that job's record
-- ARGV[1] job id
-- returns "pending" (not yet); "confirmed" (asynq took its first delivery); "gone" (it was
--         abandoned: asynq refused it); "unconfirmed" (its enqueuer died: the flag lapsed unconfirmed)
if redis.call('GET', KEYS[1]) == ARGV[1] then return 'pending' end
local rec = record_get(KEYS[2], {'status', 'confirmed'}) -- a final record's confirmation is derived
if rec.confirmed == '1' then return 'confirmed' end
if not rec.status then return 'gone' end
return 'unconfirmed'
