-- reseal: write fields of a job record again (the re-encrypt command moves them to the current
-- key), each only if it still holds the value the caller read: compare and set, so a run, a
-- replace or a finish that wrote the field meanwhile keeps its newer value, and a record that is
-- gone is not brought back. HSET keeps the record's TTL.
-- KEYS[1] job record
-- ARGV[1..] field, value read, value to write, ... (triples)
-- returns the number of fields written
local n = 0
for i = 1, #ARGV, 3 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 2])
    n = n + 1
  end
end
return n
