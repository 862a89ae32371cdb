-- reconcile: a job that has not ended, whose delivery asynq no longer has (deleted from the UI or
-- the CLI, lost) or holds archived, is taken again before the reconciler enqueues (or runs) that
-- delivery: the record must be as the reconciler read it (queued or retrying, confirmed, the same
-- delivery and updated_at). updated_at moves to now, so another reconciler that read the same
-- record finds it changed and leaves it; the timeline says what was repaired.
-- KEYS[1] job record, KEYS[2] job timeline
-- ARGV[1] the delivery, ARGV[2] updated_at as read (unix ms), ARGV[3] now (unix ms), ARGV[4]
-- retention ms, ARGV[5] timeline cap, ARGV[6] reconciler's worker id, ARGV[7] the event's detail
-- returns "ok"; "gone" (no record); "moved" (the record changed since it was read: nothing written)
local rec = record_get(KEYS[1], {'status', 'delivery', 'updated_at', 'confirmed', 'attempt'})
if not rec.status then return 'gone' end
if (rec.status ~= 'queued' and rec.status ~= 'retrying') or rec.confirmed == '0' or rec.delivery ~= ARGV[1]
  or rec.updated_at ~= ARGV[2] then
  return 'moved'
end
redis.call('HSET', KEYS[1], 'updated_at', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
timeline_push(KEYS[2], ARGV[5], ARGV[4], event({at = tonumber(ARGV[3]), event = 'reconciled', delivery = ARGV[1],
  attempt = tonumber(rec.attempt), worker = ARGV[6], detail = ARGV[7]}))
return 'ok'
