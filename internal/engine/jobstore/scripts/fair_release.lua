-- fair_release: an admitted job that waited for its key becomes queued, once: only a waiting job
-- changes, so a release told twice (the dispatcher and the sweep) writes once. The caller then
-- delivers it with its first delivery's id, which asynq refuses a second time.
-- KEYS[1] job record, KEYS[2] job timeline
-- ARGV[1] now (unix ms), ARGV[2] retention ms, ARGV[3] timeline cap, ARGV[4] worker id,
-- ARGV[5] the key it waited for
-- returns {"released", delivery, op_key, dedup}; {"gone"} no record;
--         {"not_waiting", status, delivery, op_key, dedup} released before, or ended (cancelled, expired)
local rec = record_get(KEYS[1], {'status', 'delivery', 'op_key', 'dedup'})
if not rec.status then return {'gone'} end
if rec.status ~= 'waiting' then
  return {'not_waiting', rec.status, rec.delivery or '', rec.op_key or '', rec.dedup or ''}
end
redis.call('HSET', KEYS[1], 'status', 'queued', 'updated_at', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
timeline_push(KEYS[2], ARGV[3], ARGV[2], event({at = tonumber(ARGV[1]), event = 'admitted', delivery = rec.delivery,
  worker = ARGV[4], detail = 'its turn for key ' .. ARGV[5]}))
return {'released', rec.delivery or '', rec.op_key or '', rec.dedup or ''}
