-- wf_release: a held workflow node whose parents have ended as its policy requires becomes
-- queued (or waiting), once: only a held node changes, so a release told twice (the ending process and the
-- sweeper) writes once, and the caller delivers only when this script says released (the
-- delivery's asynq task id is the job's first, so a second enqueue of it is refused by asynq).
-- A crash between this script and the delivery leaves a queued job without a delivery, which the
-- reconciler delivers after its grace.
-- KEYS[1] job record, KEYS[2] job timeline
-- ARGV[1] now (unix ms), ARGV[2] retention ms, ARGV[3] timeline cap, ARGV[4] worker id, ARGV[5] the
-- status it takes (queued; waiting for a fairly dispatched type's node, which waits for its key)
-- returns {"released", type, tenant, resource, op_key, payload}; {"gone"} no record;
--         {"not_held", status} released before, or ended (cancelled, expired)
local rec = record_get(KEYS[1], {'status', 'type', 'tenant', 'resource', 'op_key', 'payload', 'delivery'})
if not rec.status then return {'gone'} end
if rec.status ~= 'held' then return {'not_held', rec.status} end
redis.call('HSET', KEYS[1], 'status', ARGV[5], 'updated_at', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
timeline_push(KEYS[2], ARGV[3], ARGV[2], event({at = tonumber(ARGV[1]), event = 'released', delivery = rec.delivery,
  worker = ARGV[4], detail = 'its parents ended'}))
return {'released', rec.type or '', rec.tenant or '', rec.resource or '', rec.op_key or '', rec.payload or ''}
