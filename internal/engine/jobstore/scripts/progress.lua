-- progress (body; runs after locking's fence prelude, not the job prelude): a run's progress in the
-- job record, never lower than what the same run reported before. A stale token never gets here (the
-- prelude answers "STALE <token>"): a later run, or a cancel, raised the record's fence.
-- KEYS[1] job record (its own fence record)
-- ARGV[1] fencing token, ARGV[2] lease owner (the prelude's), ARGV[3] percent (0-100), ARGV[4] note,
-- ARGV[5] now (unix ms), ARGV[6] retention ms
-- returns 1 when written; an error reply "BACKWARDS <percent>" (nothing written) when this run
--         reported more before
local token = string.format('%d', tonumber(ARGV[1]))
local cur = redis.call('HMGET', KEYS[1], 'progress', 'progress_token')
if cur[2] == token and tonumber(cur[1] or '0') > tonumber(ARGV[3]) then
  return redis.error_reply('BACKWARDS ' .. cur[1])
end
redis.call('HSET', KEYS[1], 'progress', ARGV[3], 'progress_note', ARGV[4], 'progress_token', token, 'progress_at', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return 1
