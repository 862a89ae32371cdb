-- event: append events to a job's timeline without changing its status (bounces, lost leases), and
-- keep the job's record alive for another retention period (a confirmed one only).
-- KEYS[1] job timeline, KEYS[2] job record
-- ARGV[1] timeline cap, ARGV[2] retention ms, ARGV[3..] event JSON, oldest first
-- returns the timeline's length
for i = 3, #ARGV do
  timeline_push(KEYS[1], ARGV[1], ARGV[2], ARGV[i])
end
-- An unconfirmed record keeps its claim's TTL: an event must not make a job nobody accepted last.
if redis.call('HGET', KEYS[2], 'confirmed') ~= '0' then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
else
  redis.call('PEXPIRE', KEYS[1], redis.call('PTTL', KEYS[2]))
end
return redis.call('LLEN', KEYS[1])
