-- raise: lift a resource's fence counter to at least a floor, so its next token is above a token
-- some store outside Redis has seen (the counter was lost, e.g. in a failover, and restarted).
-- KEYS[1] fence counter key ({tag}:fence)
-- ARGV[1] floor
-- returns the counter after the call
return fence_raise(KEYS[1], ARGV[1])
