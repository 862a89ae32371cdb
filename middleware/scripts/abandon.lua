-- abandon: asynq did not take the job's first delivery: remove its record, timeline and the dedup
-- marker if it still names the job, so nothing is left behind.
-- KEYS[1] job record, KEYS[2] job timeline, KEYS[3] dedup marker (the record key when none)
-- ARGV[1] job id
-- returns 1
if KEYS[3] ~= KEYS[1] and redis.call('GET', KEYS[3]) == ARGV[1] then
  redis.call('DEL', KEYS[3])
end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
