-- lease_rescue: whether a lease-level run lost its worker, and (commit) handing its task to a copy.
-- A run is lost when its marker says running under an owner that no longer holds the resource's
-- lease: its worker died or paused past the lease, and no renewal can bring that lease back.
-- A task that never started (no marker: its worker died between asynq's dequeue and the start) is
-- handed to a copy in three steps: adopt marks it "adopting:<copy>" (or names the copy an earlier
-- pass marked, whose enqueue may have failed), the copy is enqueued, adopted makes the mark
-- "superseded:<copy>"; unadopt takes the mark back when the enqueue failed. A copy that starts while
-- the mark says adopting takes the task itself; the task, should it start first, runs (the copy then
-- finds it running or ended): whichever starts first runs, and a mark left by a failed enqueue is
-- finished by the next pass.
-- KEYS[1] the resource's lease, KEYS[2] the task's run marker
-- ARGV[1] "check", "commit", "adopt", "adopted" or "unadopt", ARGV[2] the copy's task id (all but
-- check), ARGV[3] superseded marker TTL ms
-- returns "lost" (check: enqueue a copy, then commit), "superseded" (commit: the copy is the task now,
--         or the copy, delivered before this commit, took it over itself; adopted: likewise),
--         "alive" (its owner holds the lease), "skip" (no run marker: not started, ended, or handed
--         to another copy; adopt: started; adopted: started first; unadopt: always);
--         adopt: "adopting:<copy>", the copy to enqueue (ARGV[2], or an earlier pass's)
local marker = redis.call('GET', KEYS[2])
if ARGV[1] == 'adopt' then
  if marker and string.sub(marker, 1, 9) == 'adopting:' then return marker end
  if marker then return 'skip' end
  redis.call('SET', KEYS[2], 'adopting:' .. ARGV[2], 'PX', ARGV[3])
  return 'adopting:' .. ARGV[2]
end
if ARGV[1] == 'adopted' then
  if marker == 'adopting:' .. ARGV[2] then
    redis.call('SET', KEYS[2], 'superseded:' .. ARGV[2], 'PX', ARGV[3])
    return 'superseded'
  end
  if marker == 'superseded:' .. ARGV[2] then return 'superseded' end
  return 'skip'
end
if ARGV[1] == 'unadopt' then
  if marker == 'adopting:' .. ARGV[2] then redis.call('DEL', KEYS[2]) end
  return 'skip'
end
if ARGV[1] == 'commit' and marker == 'superseded:' .. ARGV[2] then return 'superseded' end
if not marker or string.sub(marker, 1, 8) ~= 'running:' then return 'skip' end
if lease_holder(KEYS[1]) == string.sub(marker, 9) then return 'alive' end
if ARGV[1] == 'commit' then
  redis.call('SET', KEYS[2], 'superseded:' .. ARGV[2], 'PX', ARGV[3])
  return 'superseded'
end
return 'lost'
