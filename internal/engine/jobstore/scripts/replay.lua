-- replay: a failed job takes the new delivery the caller has already enqueued (delayed, so that it
-- cannot start before this runs): status queued (or waiting), attempts reset, delivery number n, no start_by
-- (an operator's replay is the decision to run it now, deadline or not). Run after the
-- enqueue, so a replay that fails or gives up leaves the job failed, and the new delivery, finding
-- it failed, is acknowledged without running.
-- KEYS[1] job record, KEYS[2] job timeline
-- ARGV[1] deadline (unix ms in Redis's clock; 0 none): past it the caller gave up, or the delivery
-- may have started, and nothing is written, ARGV[2] now (unix ms), ARGV[3] retention ms,
-- ARGV[4] timeline cap, ARGV[5] n, the new delivery's number, ARGV[6] the status it takes (queued;
-- waiting for a fairly dispatched type's job, which waits for its key's turn)
-- returns {"ok"}; {"gone"}; {"conflict", status} unless failed; {"unrunnable"} when the record
--         lacks its payload; {"moved"} when a delivery numbered n or later exists already;
--         {"expired"} past the deadline
if past_deadline(ARGV[1]) then return {'expired'} end
local rec = record_get(KEYS[1], {'status', 'job_id', 'deliveries', 'payload'})
if not rec.status then return {'gone'} end
if rec.status ~= 'failed' then return {'conflict', rec.status} end
if not rec.payload then return {'unrunnable'} end
local n = tonumber(ARGV[5])
if tonumber(rec.deliveries or '0') >= n then return {'moved'} end
local delivery = rec.job_id .. '.d' .. n
redis.call('HSET', KEYS[1], 'status', ARGV[6], 'attempt', 0, 'deliveries', n, 'delivery', delivery,
  'updated_at', ARGV[2], 'last_error', '', 'finished_at', '')
redis.call('HDEL', KEYS[1], 'start_by') -- none, as the create leaves it
timeline_push(KEYS[2], ARGV[4], ARGV[3], event({at = tonumber(ARGV[2]), event = 'replayed', delivery = delivery}))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {'ok'}
