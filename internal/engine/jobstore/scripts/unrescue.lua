-- unrescue: asynq did not take a rescue's new delivery: put the job back as it was, so the next
-- pass rescues it again.
-- KEYS[1] job record
-- ARGV[1] the rescue's delivery id, ARGV[2] the previous delivery id
-- returns 1 when put back, 0 when the job moved on
local rec = record_get(KEYS[1], {'status', 'delivery'})
if rec.status ~= 'retrying' or rec.delivery ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'status', 'processing', 'delivery', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'deliveries', -1)
return 1
