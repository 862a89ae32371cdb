-- fence_prelude: runs before the body of every fenced script (see FencedScript).
-- KEYS[1] the fence record: a hash holding the highest token that wrote the target and its owner
--         (fields _fence_token, _fence_owner); the body may use it as the target itself
-- ARGV[1] fencing token, ARGV[2] lease owner; the body's own arguments start at ARGV[3]
-- returns an error reply "STALE <current token>" and writes nothing when a higher token, or the
--         same token from another owner, has written the target; otherwise records the token and
--         runs the body, whose reply is the script's reply.
local fence_token = tonumber(ARGV[1])
local fence_owner = ARGV[2]
do
  local cur = redis.call('HMGET', KEYS[1], '_fence_token', '_fence_owner')
  local cur_token = tonumber(cur[1])
  if cur_token and (fence_token < cur_token or (fence_token == cur_token and cur[2] ~= fence_owner)) then
    return redis.error_reply('STALE ' .. cur_token)
  end
  redis.call('HSET', KEYS[1], '_fence_token', ARGV[1], '_fence_owner', fence_owner)
end
