-- fence_prelude: runs before the body of every fenced script (see FencedScript); itself a body on
-- protocol.lua (fence_check, fence_record).
-- KEYS[1] the fence record: a hash holding the highest token that wrote the target and its owner;
--         the body may use it as the target itself
-- ARGV[1] fencing token, ARGV[2] lease owner; the body's own arguments start at ARGV[3]
-- returns an error reply "STALE <current token>" and writes nothing when a higher token, or the
--         same token from another owner, has written the target; otherwise records the token and
--         runs the body, whose reply is the script's reply.
local fence_token = tonumber(ARGV[1])
local fence_owner = ARGV[2]
do
  local current = fence_check(KEYS[1], fence_token, fence_owner)
  if current then return redis.error_reply('STALE ' .. current) end
  fence_record(KEYS[1], fence_token, fence_owner)
end
