-- pending: has the job a dedup marker named while its enqueue was in flight been confirmed since?
-- KEYS[1] the marker's pending flag, KEYS[2] that job's record
-- ARGV[1] job id
-- returns "pending" (not yet); "confirmed" (asynq took its first delivery); "gone" (it was
--         abandoned: asynq refused it); "unconfirmed" (its enqueuer died: the flag lapsed unconfirmed)
if redis.call('GET', KEYS[1]) == ARGV[1] then return 'pending' end
local confirmed = redis.call('HGET', KEYS[2], 'confirmed')
if confirmed == '1' then return 'confirmed' end
if confirmed == false and redis.call('EXISTS', KEYS[2]) == 0 then return 'gone' end
return 'unconfirmed'
