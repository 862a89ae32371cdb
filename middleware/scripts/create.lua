-- create: write a new job's record and first timeline event (before its first delivery is enqueued).
-- KEYS[1] job record, KEYS[2] job timeline
-- ARGV[1] retention ms, ARGV[2] event JSON, ARGV[3..] field, value, ...
-- returns 1, or 0 when a record with this id exists (nothing written)
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return 1
