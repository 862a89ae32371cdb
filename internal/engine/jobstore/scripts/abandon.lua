-- abandon: the job's enqueue was not accepted (asynq did not take its first delivery, or its
-- confirmation failed): remove its record, timeline, and the dedup marker and its pending flag if
-- they still name the job, so nothing is left behind. A record that is confirmed is kept: the
-- confirmation ran, only its answer was lost, and the job stands.
-- KEYS[1] job record, KEYS[2] job timeline, KEYS[3] dedup marker (the record key when none),
-- KEYS[4] the marker's pending flag (the record key when none)
-- ARGV[1] job id
-- returns 1 when removed, 0 when the record is confirmed (nothing removed)
if record_get(KEYS[1], {'status', 'confirmed'}).confirmed == '1' then return 0 end -- derived when final
for i = 3, 4 do
  if KEYS[i] ~= KEYS[1] and redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
  end
end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
