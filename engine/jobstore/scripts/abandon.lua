-- abandon: asynq did not take the job's first delivery: remove its record, timeline, and the dedup
-- marker and its pending flag if they still name the job, so nothing is left behind.
-- KEYS[1] job record, KEYS[2] job timeline, KEYS[3] dedup marker (the record key when none),
-- KEYS[4] the marker's pending flag (the record key when none)
-- ARGV[1] job id
-- returns 1
for i = 3, 4 do
  if KEYS[i] ~= KEYS[1] and redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
  end
end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
