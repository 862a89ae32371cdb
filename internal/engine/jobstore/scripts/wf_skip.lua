-- wf_skip: a held workflow node that needed a parent which did not end done ends skipped, once
-- (only a held node changes); why becomes its last_error.
-- KEYS[1] job record, KEYS[2] job timeline
-- ARGV[1] now (unix ms), ARGV[2] retention ms, ARGV[3] timeline cap, ARGV[4] worker id, ARGV[5] why
-- returns {"skipped"}; {"gone"} no record; {"not_held", status} released before, or ended
local rec = record_get(KEYS[1], {'status', 'delivery'})
if not rec.status then return {'gone'} end
if rec.status ~= 'held' then return {'not_held', rec.status} end
redis.call('HSET', KEYS[1], 'status', 'skipped', 'finished_at', ARGV[1], 'updated_at', ARGV[1], 'last_error', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
timeline_push(KEYS[2], ARGV[3], ARGV[2], event({at = tonumber(ARGV[1]), event = 'skipped', delivery = rec.delivery,
  worker = ARGV[4], detail = ARGV[5]}))
return {'skipped'}
