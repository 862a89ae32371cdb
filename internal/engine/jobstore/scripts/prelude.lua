-- prelude: the helpers every job script is built with (Store composes prelude + body); all local,
-- so nothing leaks into Redis's Lua state.
-- past_deadline(ms): true when Redis's clock is past ms (unix ms in Redis's clock; 0: no deadline).
--   A caller that gave up has answered "nothing was kept"; a stalled Redis may still run what it
--   sent, and a script that checks its deadline then returns before writing.
-- record_get(key, fields): the job record's fields (HMGET) as a table by name; absent ones are nil,
--   but for the fields a final record leaves out because it can derive them (record_compact):
--   job_id (the key's), delivery (job_id .. '.d' .. deliveries), confirmed ('1'), created_at (the
--   id's millisecond), updated_at (finished_at), fencing_token (the fence's token) and deliveries
--   (1: a final record keeps only a count above one), queue and max_attempts (final_defaults: a final
--   record keeps only another value), which are derived when absent from a final record
--   (jobstore/derive.go is the Go twin).
-- timeline_push(key, cap, ttl_ms, json): append one event (JSON object), keep the newest cap
--   (0: all), keep the list for ttl_ms. Each event is stored with its position since the job's
--   creation first ('{"seq":n,...'): n is the last kept event's plus one (its index in a list
--   written before positions were, the list's length), so positions survive the cap's trim. An
--   empty list goes on after the events its record (the key less ':timeline') stands for.
-- timeline_implied(record): how many of the job's first events the record stands for instead of
--   its list (0-3: enqueued, lease_acquired, done of its first run; 0-4 for a job that waited for
--   its key's admission: enqueued, waiting, lease_acquired, done; jobstore/fold.go), the
--   enqueuing worker, and the position of the first run's lease_acquired in that sequence (1, or
--   2 after a waiting), from the record's timeline_folded ('<k>:<worker>', 'w<k>:<worker>' for a
--   job that waited; a mark without the count, written before it was, stands for all three).
-- timeline_mark_of(mark): timeline_implied of a mark already read (nil: none).
-- timeline_imply(record, k, by, lead): the record stands for the first k events (by enqueued
--   them) of the sequence whose lease_acquired is at lead; timeline_mark(k, by, lead) is the
--   mark's value, for a caller that writes it with other fields.
-- timeline_stored(seq, json): an event's JSON as the list stores it, its position first.
-- record_compact(key, rec, final): end a job's record, by the run that holds its fence (the
--   finish, or the start's own end) and has just written its status, finished_at and, when not
--   final, updated_at: rec holds what it read of record_end_fields, and last_error as written.
--   Drops an empty last_error (the create writes no other field that only says "none": no
--   not_before or start_by 0, no empty op_key or dedup; every reader takes an absent field for
--   the same none; a record created before 2026-12-05 keeps its nones); and lease_owner,
--   the run's, which the record's fence fields keep (Store.Load reads it back from there). A
--   final record (done or revoked: it never runs again) also drops what record_get derives
--   (job_id, confirmed, updated_at and fencing_token always say it by then; delivery,
--   created_at, deliveries, queue and max_attempts when they do), an empty payload and heartbeat_at, and seals its fence (fence_seal:
--   no write of its last run's token lands any more; the owner is forgotten). About 650 -> 400 B
--   a job for the retention.
-- event(t): the JSON of an event table (at, event, delivery, token, attempt, worker, detail).
-- job_expire(record, timeline, marker, rec, now, reason, why, cap, ttl_ms, worker): end a waiting
--   job as expired (reason start_by or retention; why becomes last_error): a dedup marker naming
--   it is released (any policy: the job will not run), record and timeline kept for ttl_ms, event
--   expired. rec holds the record's job_id, status, delivery and attempt; marker is the record's
--   key when the job has none.
local function past_deadline(ms)
  ms = tonumber(ms)
  if ms == 0 then return false end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > ms
end
local derivable = {job_id = true, delivery = true, confirmed = true, created_at = true, updated_at = true,
  fencing_token = true, deliveries = true, queue = true, max_attempts = true}
-- final_defaults: what a final record's queue and max_attempts say when it leaves them out (the
-- engine's defaults; jobstore/derive.go's finalDefaults is the Go twin).
local final_defaults = {queue = 'default', max_attempts = '5'}
local function record_id(key)
  return string.match(key, ':job:([0-9a-f%-]+)$')
end
local function id_millis(id)
  return string.format('%d', tonumber(string.sub(id, 18, 29), 16))
end
local function record_derived(key)
  local id = record_id(key)
  local f = redis.call('HMGET', key, 'status', 'deliveries', 'finished_at')
  if not id or (f[1] ~= 'done' and f[1] ~= 'revoked') then return {} end -- only a final record leaves them out
  local deliveries = f[2] or '1'
  return {job_id = id, delivery = id .. '.d' .. deliveries, confirmed = '1', created_at = id_millis(id),
    updated_at = f[3] or nil, fencing_token = string.format('%d', fence_seen(key)), deliveries = deliveries,
    queue = final_defaults.queue, max_attempts = final_defaults.max_attempts}
end
local function record_get(key, fields)
  local vals = redis.call('HMGET', key, unpack(fields))
  local rec, found, missing = {}, false, false
  for i, f in ipairs(fields) do
    if vals[i] then
      rec[f], found = vals[i], true
    elseif derivable[f] then
      missing = true
    end
  end
  if found and missing then
    local d = record_derived(key)
    for _, f in ipairs(fields) do
      if not rec[f] and derivable[f] then rec[f] = d[f] end
    end
  end
  return rec
end
local function timeline_mark_of(mark)
  if not mark then return 0, nil, 1 end
  local w, k, by = string.match(mark, '^(w?)([0-4]):(.*)$')
  if k then return tonumber(k), by, (w == 'w' and 2 or 1) end
  return 3, mark, 1
end
local function timeline_implied(record)
  return timeline_mark_of(redis.call('HGET', record, 'timeline_folded'))
end
local function timeline_mark(k, by, lead)
  if lead == 2 then return 'w' .. k .. ':' .. by end
  return k .. ':' .. by
end
local function timeline_imply(record, k, by, lead)
  redis.call('HSET', record, 'timeline_folded', timeline_mark(k, by, lead))
end
local function timeline_stored(seq, json)
  local body = string.sub(json, 2)
  if body ~= '}' then body = ',' .. body end
  return '{"seq":' .. seq .. body
end
local function timeline_next(key)
  local last = redis.call('LINDEX', key, -1)
  if last then
    return (tonumber(string.match(last, '^{"seq":(%d+)') or '') or redis.call('LLEN', key) - 1) + 1
  end
  return (timeline_implied(string.sub(key, 1, #key - 9)))
end
local function timeline_push(key, cap, ttl_ms, json)
  local n = redis.call('RPUSH', key, timeline_stored(timeline_next(key), json))
  cap = tonumber(cap)
  if cap > 0 and n > cap then redis.call('LTRIM', key, -cap, -1) end
  redis.call('PEXPIRE', key, ttl_ms)
end
local record_end_fields = {'delivery', 'deliveries', 'created_at'}
local function record_compact(key, rec, final)
  local drop = {'lease_owner'}
  if rec.last_error == '' then drop[#drop + 1] = 'last_error' end
  if final then
    local id = record_id(key)
    for _, f in ipairs({'job_id', 'confirmed', 'updated_at', 'fencing_token', 'heartbeat_at'}) do drop[#drop + 1] = f end
    if rec.delivery == id .. '.d' .. (rec.deliveries or '') then drop[#drop + 1] = 'delivery' end
    if rec.deliveries == '1' then drop[#drop + 1] = 'deliveries' end
    if rec.created_at == id_millis(id) then drop[#drop + 1] = 'created_at' end
    if redis.call('HSTRLEN', key, 'payload') == 0 then drop[#drop + 1] = 'payload' end
    local kept = redis.call('HMGET', key, 'queue', 'max_attempts')
    if kept[1] == final_defaults.queue then drop[#drop + 1] = 'queue' end
    if kept[2] == final_defaults.max_attempts then drop[#drop + 1] = 'max_attempts' end
  end
  redis.call('HDEL', key, unpack(drop))
  if final then fence_seal(key) end
end
local function event(t)
  return cjson.encode(t)
end
local function job_expire(record, timeline, marker, rec, now, reason, why, cap, ttl_ms, worker)
  if marker ~= record and redis.call('GET', marker) == rec.job_id then redis.call('DEL', marker) end
  redis.call('HSET', record, 'status', 'expired', 'finished_at', now, 'updated_at', now, 'last_error', why)
  redis.call('PEXPIRE', record, ttl_ms)
  timeline_push(timeline, cap, ttl_ms, event({at = tonumber(now), event = 'expired', delivery = rec.delivery,
    attempt = tonumber(rec.attempt or '0'), worker = worker, detail = reason .. ': ' .. why .. ' (was ' .. rec.status .. ')'}))
end
