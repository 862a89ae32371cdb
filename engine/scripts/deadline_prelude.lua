-- deadline prelude: put before the body of a script whose writes carry their caller's deadline
-- (NewDeadlineScript). A caller that gave up has answered "nothing was kept"; a stalled Redis
-- may still run what it sent, and the body then returns before writing.
-- past_deadline(ms): true when Redis's clock is past ms (unix ms in Redis's clock; 0: none).
local function past_deadline(ms)
  ms = tonumber(ms)
  if ms == 0 then return false end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > ms
end
