-- event: append one event to a job's timeline without changing its status (bounces), and keep the
-- job's record alive for another retention period.
-- KEYS[1] job timeline, KEYS[2] job record
-- ARGV[1] event JSON, ARGV[2] timeline cap, ARGV[3] retention ms
-- returns the timeline's length
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return redis.call('LLEN', KEYS[1])
