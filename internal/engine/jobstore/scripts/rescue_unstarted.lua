-- rescue_unstarted: a job whose delivery a worker took from asynq and never started (the worker
-- died between asynq's dequeue and the start script: the job is still queued or retrying (or
-- waiting: a fairly dispatched job's record stays so once admitted, until its start), its
-- delivery active in asynq and listed by no live server) adopts its next delivery, which the
-- caller has already enqueued (so that a rescuer dying in between leaves nothing to repair). No
-- run was lost: status and attempt stay. Several rescuers may race: only the one that still finds
-- the delivery current and the next one unnumbered wins; a next delivery not adopted is sent back
-- at its start (untaken, start.lua) for a few seconds, then acknowledged as stale, as the old one
-- is, should asynq redeliver it.
-- KEYS[1] job record, KEYS[2] job timeline
-- ARGV[1] the active delivery id, ARGV[2] the next delivery id (enqueued), ARGV[3] now (unix ms),
-- ARGV[4] retention ms, ARGV[5] timeline cap, ARGV[6] rescuer's worker id
-- returns "rescued"; "skip" (started, ended, unconfirmed, another delivery, or numbered since)
local rec = record_get(KEYS[1], {'status', 'delivery', 'deliveries', 'confirmed', 'attempt', 'job_id'})
if (rec.status ~= 'queued' and rec.status ~= 'retrying' and rec.status ~= 'waiting') or rec.confirmed == '0'
  or rec.delivery ~= ARGV[1]
  or rec.job_id .. '.d' .. ((tonumber(rec.deliveries) or 0) + 1) ~= ARGV[2] then
  return 'skip'
end
redis.call('HINCRBY', KEYS[1], 'deliveries', 1)
redis.call('HSET', KEYS[1], 'delivery', ARGV[2], 'updated_at', ARGV[3])
timeline_push(KEYS[2], ARGV[5], ARGV[4], event({at = tonumber(ARGV[3]), event = 'rescued', delivery = ARGV[2],
  attempt = tonumber(rec.attempt), worker = ARGV[6],
  detail = 'taken by a worker that never started it; previous delivery ' .. ARGV[1]}))
return 'rescued'
