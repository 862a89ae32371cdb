-- Appends shard queue names to a logical queue's record of its shards, unless another process
-- changed the record since this one read it (compare and append), and returns the record.
-- KEYS[1]  the record: a list of the logical queue's shard queue names, in shard order
-- ARGV[1]  how many names the caller read in the record
-- ARGV[2..] the names to append
-- returns  every name of the record, in order (the caller's additions included when they were made)
if redis.call('LLEN', KEYS[1]) == tonumber(ARGV[1]) then
  for i = 2, #ARGV do
    redis.call('RPUSH', KEYS[1], ARGV[i])
  end
end
return redis.call('LRANGE', KEYS[1], 0, -1)
