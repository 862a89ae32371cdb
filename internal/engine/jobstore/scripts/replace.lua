-- replace: a new request for a waiting job (dedup policy replace) becomes the payload it runs with.
-- KEYS[1] job record, KEYS[2] job timeline
-- ARGV[1] payload, ARGV[2] not-before (unix ms; 0 none), ARGV[3] event JSON, ARGV[4] timeline cap,
-- ARGV[5] retention ms
-- returns 1 when replaced, 0 when the job no longer waits (it started, or is gone)
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'queued' and status ~= 'retrying' then return 0 end
if tonumber(ARGV[2]) > 0 then
  redis.call('HSET', KEYS[1], 'payload', ARGV[1], 'not_before', ARGV[2])
else
  redis.call('HSET', KEYS[1], 'payload', ARGV[1])
  redis.call('HDEL', KEYS[1], 'not_before') -- none, as the create leaves it
end
timeline_push(KEYS[2], ARGV[4], ARGV[5], ARGV[3])
if redis.call('HGET', KEYS[1], 'confirmed') ~= '0' then
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
else
  redis.call('PEXPIRE', KEYS[2], redis.call('PTTL', KEYS[1])) -- a claim keeps its TTL
end
return 1
