-- list: one page of a tenant's job index, newest first. Entries of the same millisecond are in
-- descending id order, so a cursor (score, id) is exact even among them.
-- KEYS[1] the tenant's index (sorted set: score the job's created ms, member its id)
-- ARGV[1] the cursor's score ('+inf': first page), ARGV[2] the cursor's id ('' first page),
-- ARGV[3] page size (1-200)
-- returns {id, score, id, score, ...}: at most ARGV[3] entries after the cursor
local limit = tonumber(ARGV[3])
local out = {}
local offset = 0
while #out < 2 * limit do
  local r = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[1], '-inf', 'WITHSCORES', 'LIMIT', offset, limit)
  if #r == 0 then break end
  for i = 1, #r, 2 do
    local id, score = r[i], r[i + 1]
    -- Skip the cursor's millisecond up to and including the cursor's id.
    local seen = ARGV[2] ~= '' and tonumber(score) == tonumber(ARGV[1]) and id >= ARGV[2]
    if not seen and #out < 2 * limit then
      out[#out + 1] = id
      out[#out + 1] = score
    end
  end
  offset = offset + #r / 2
end
return out
