-- confirm: asynq took the job's first delivery: the job is confirmed and kept for its retention,
-- its dedup marker stops being pending and (still naming the job) now lasts the policy's TTL
-- instead of the claim.
-- KEYS[1] dedup marker (the record key when none), KEYS[2] the marker's pending flag (the record
-- key when none), KEYS[3] job record, KEYS[4] job timeline
-- ARGV[1] job id, ARGV[2] policy TTL ms (0: keep the marker's TTL, e.g. a throttle window),
-- ARGV[3] deadline (unix ms in Redis's clock; 0 none), ARGV[4] retention ms
-- KEYS[5], KEYS[6] (optional) a fair job's once and admitted hashes, sent by a confirmation that
-- rides after the job's wait in its create's pipeline (CreateAndWait): a job in neither has not
-- waited yet (its wait met NOSCRIPT and is sent again after this), and a confirmed job must be in
-- a list, so it is not confirmed then
-- returns "confirmed"; "expired" past the deadline (nothing written: the claim runs out and the
--         delivery finds no record); "gone" when the record is gone (its claim ran out);
--         "unwaited" when KEYS[5] is given and the job has not waited (nothing written)
if past_deadline(ARGV[3]) then return 'expired' end
if redis.call('EXISTS', KEYS[3]) == 0 then return 'gone' end
if KEYS[5] and redis.call('HEXISTS', KEYS[5], ARGV[1]) == 0 and redis.call('HEXISTS', KEYS[6], ARGV[1]) == 0 then
  return 'unwaited'
end
redis.call('HSET', KEYS[3], 'confirmed', '1')
redis.call('PEXPIRE', KEYS[3], ARGV[4])
redis.call('PEXPIRE', KEYS[4], ARGV[4])
if KEYS[2] ~= KEYS[3] and redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('DEL', KEYS[2])
end
if KEYS[1] ~= KEYS[3] and redis.call('GET', KEYS[1]) == ARGV[1] and tonumber(ARGV[2]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 'confirmed'
