-- list: one page of a job index, newest first: a tenant's index, or the indexes of tags (one
-- slot: a tag's index sits beside its tenant's). Entries of the same millisecond are in
-- descending id order, so a cursor (score, id) is exact even among them.
-- KEYS[1..n] the indexes (sorted sets: score the job's created ms, member its id); n > 1: tags'
-- ARGV[1] the highest score ('+inf': no bound), ARGV[2] the cursor's id ('' none; when set, the
-- cursor's score is ARGV[1]), ARGV[3] page size (1-200), ARGV[4] the lowest score ('-inf'),
-- ARGV[5] with several keys: 'any' (a job in any of them) or 'all' (in every one)
-- returns {{id, score, id, score, ...}, resume id, resume score}: at most ARGV[3] entries after
--   the cursor; resume id is '' unless the 'all' walk stopped at its budget before the page
--   was full, when the next page starts after (resume score, resume id)
local max, after, limit, low = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]

-- walk calls fn(id, score) for the entries of key after the cursor, newest first, until fn
-- returns false or the entries run out.
local function walk(key, fn)
  local offset = 0
  while true do
    local r = redis.call('ZREVRANGEBYSCORE', key, max, low, 'WITHSCORES', 'LIMIT', offset, limit)
    if #r == 0 then return end
    for i = 1, #r, 2 do
      local id, score = r[i], r[i + 1]
      -- Skip the cursor's millisecond up to and including the cursor's id.
      local seen = after ~= '' and tonumber(score) == tonumber(max) and id >= after
      if not seen and not fn(id, score) then return end
    end
    offset = offset + #r / 2
  end
end

local out = {}
local function take(id, score)
  out[#out + 1] = id
  out[#out + 1] = score
  return #out < 2 * limit
end

if #KEYS == 1 then
  walk(KEYS[1], take)
  return {out, '', ''}
end

if ARGV[5] == 'any' then
  -- The first page of each index, merged: every entry of the union's page is among them.
  local all, seen = {}, {}
  for _, key in ipairs(KEYS) do
    local n = 0
    walk(key, function(id, score)
      if not seen[id] then
        seen[id] = true
        all[#all + 1] = {id, tonumber(score), score}
      end
      n = n + 1
      return n < limit
    end)
  end
  table.sort(all, function(a, b)
    if a[2] ~= b[2] then return a[2] > b[2] end
    return a[1] > b[1]
  end)
  for i = 1, math.min(limit, #all) do take(all[i][1], all[i][3]) end
  return {out, '', ''}
end

-- 'all': walk the smallest index, keep what every other one holds, looking in the smaller ones
-- first (a miss there ends the look-up soonest). The budget counts commands, not entries: an
-- entry read is one, each look-up in another index one more, at most 10 x limit a call (a full
-- page of matches over 8 tags takes 8 x limit), so a call's time does not grow with the tags.
local sizes = {}
for i = 1, #KEYS do sizes[i] = redis.call('ZCARD', KEYS[i]) end
local order = {}
for i = 1, #KEYS do order[i] = i end
table.sort(order, function(a, b)
  if sizes[a] ~= sizes[b] then return sizes[a] < sizes[b] end
  return a < b
end)
local driver = order[1]
local budget, spent = 10 * limit, 0
local resume_id, resume_score = '', ''
walk(KEYS[driver], function(id, score)
  spent = spent + 1
  local inall = true
  for j = 2, #order do
    spent = spent + 1
    if not redis.call('ZSCORE', KEYS[order[j]], id) then
      inall = false
      break
    end
  end
  local more = true
  if inall then more = take(id, score) end
  if more and spent >= budget then
    resume_id, resume_score = id, score
    return false
  end
  return more
end)
return {out, resume_id, resume_score}
