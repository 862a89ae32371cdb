-- fence_prelude: runs before the body of every fenced script (see FencedScript); itself a body on
-- protocol.lua (fence_last, fence_check, fence_record).
-- KEYS[1] the fence record: a hash holding the highest token that wrote the target and its owner;
--         the body may use it as the target itself
-- KEYS[#KEYS] the resource's fence counter (FencedScript.Run appends it), or KEYS[1] again when the
--         fence carries none
-- ARGV[1] fencing token, ARGV[2] lease owner; the body's own arguments start at ARGV[3]
-- returns an error reply "STALE <current token>" and writes nothing when the counter has drawn a
--         token above this one (a newer lease, or a cancel, took the resource: the newer token need
--         not have written this target yet), or when a higher token, or the same token from
--         another owner, has written the target; otherwise records the token and runs the body,
--         whose reply is the script's reply.
local fence_token = tonumber(ARGV[1])
local fence_owner = ARGV[2]
do
  if KEYS[#KEYS] ~= KEYS[1] then
    local drawn = fence_last(KEYS[#KEYS])
    if drawn > fence_token then return redis.error_reply('STALE ' .. drawn) end
  end
  local current = fence_check(KEYS[1], fence_token, fence_owner)
  if current then return redis.error_reply('STALE ' .. current) end
  fence_record(KEYS[1], fence_token, fence_owner)
end
