-- idem_claim: claim an Idempotency-Key for a request, or answer from what the key already holds.
-- KEYS[1] idempotency record (hash)
-- ARGV[1] request fingerprint, ARGV[2] claim token, ARGV[3] claim lease ms, ARGV[4] the request's
-- deadline (unix ms in Redis's clock; 0 none): a claim that reaches Redis after it writes nothing
-- returns {"claimed"}; {"inflight"} (claimed by a request still running); {"mismatch"} (the key
--         was used for another request); {"done", status, body, location}; {"expired"}
if past_deadline(ARGV[4]) then return {'expired'} end
local rec = redis.call('HMGET', KEYS[1], 'state', 'fingerprint', 'status', 'body', 'location')
if not rec[1] then
  redis.call('HSET', KEYS[1], 'state', 'claimed', 'fingerprint', ARGV[1], 'claim', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {'claimed'}
end
if rec[2] ~= ARGV[1] then return {'mismatch'} end
if rec[1] ~= 'done' then return {'inflight'} end
return {'done', rec[3], rec[4], rec[5] or ''}
