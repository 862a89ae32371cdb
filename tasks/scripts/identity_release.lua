-- identity_release: drop a claim whose request was answered "nothing was kept", only if that
-- request created it (its job id is in the claim).
-- KEYS[1] identity claim (hash: fingerprint, job_id)
-- ARGV[1] job id of the request that created it
-- returns 1 when the claim was removed, 0 when it is another's or gone
if redis.call('HGET', KEYS[1], 'job_id') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
