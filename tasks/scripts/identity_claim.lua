-- identity_claim: bind an identity (e.g. an order: tenant + order id) to one content, for ever:
-- the first request or job to claim it names the content's fingerprint and its job; later ones
-- learn whether they carry the same content. Safe to run twice (a retried call finds its own
-- claim: "same" with its own job id).
-- KEYS[1] identity claim (hash: fingerprint, job_id; no TTL, live data like applied records)
-- ARGV[1] content fingerprint, ARGV[2] job id of the caller, ARGV[3] deadline (unix ms in Redis's
-- clock; 0 none): past it the request has been answered "nothing was kept", and nothing is written
-- returns {"created", job id} (the claim was missing and is now the caller's); {"same", job id of
--         the claim}; {"conflict", job id of the claim} (another content holds it; nothing written);
--         {"expired", ""} past the deadline (nothing written)
if past_deadline(ARGV[3]) then return {'expired', ''} end
local rec = redis.call('HMGET', KEYS[1], 'fingerprint', 'job_id')
if not rec[1] then
  redis.call('HSET', KEYS[1], 'fingerprint', ARGV[1], 'job_id', ARGV[2])
  return {'created', ARGV[2]}
end
if rec[1] == ARGV[1] then return {'same', rec[2] or ''} end
return {'conflict', rec[2] or ''}
