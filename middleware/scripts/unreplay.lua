-- unreplay: asynq did not take a replay's delivery: the job goes back to failed as it was.
-- KEYS[1] job record, KEYS[2] job timeline
-- ARGV[1] the replay's delivery id, ARGV[2] previous delivery id, ARGV[3] previous attempt,
-- ARGV[4] event JSON
-- returns 1 when rolled back, 0 when the job has moved on since
local rec = redis.call('HMGET', KEYS[1], 'status', 'delivery')
if rec[1] ~= 'queued' or rec[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'status', 'failed', 'delivery', ARGV[2], 'attempt', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'deliveries', -1)
redis.call('RPUSH', KEYS[2], ARGV[4])
return 1
