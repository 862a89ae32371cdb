-- rescue_unstarted: a job whose delivery a worker took from asynq and never started (the worker
-- died between asynq's dequeue and the start script: the job is still queued or retrying, its
-- delivery active in asynq and listed by no live server) gets a new delivery. No run was lost:
-- status and attempt stay. Several rescuers may race: only the one that still finds the delivery
-- current wins, and the old delivery, should asynq redeliver it, is stale at its start.
-- KEYS[1] job record, KEYS[2] job timeline
-- ARGV[1] the active delivery id, ARGV[2] now (unix ms), ARGV[3] retention ms, ARGV[4] timeline
-- cap, ARGV[5] rescuer's worker id
-- returns {"rescued", new delivery id}; {"skip"} (started, ended, unconfirmed, or not this delivery)
local rec = record_get(KEYS[1], {'status', 'delivery', 'confirmed', 'attempt', 'job_id'})
if (rec.status ~= 'queued' and rec.status ~= 'retrying') or rec.confirmed == '0' or rec.delivery ~= ARGV[1] then
  return {'skip'}
end
local n = redis.call('HINCRBY', KEYS[1], 'deliveries', 1)
local delivery = rec.job_id .. '.d' .. n
redis.call('HSET', KEYS[1], 'delivery', delivery, 'updated_at', ARGV[2])
timeline_push(KEYS[2], ARGV[4], ARGV[3], event({at = tonumber(ARGV[2]), event = 'rescued', delivery = delivery,
  attempt = tonumber(rec.attempt), worker = ARGV[5],
  detail = 'taken by a worker that never started it; previous delivery ' .. ARGV[1]}))
return {'rescued', delivery}
