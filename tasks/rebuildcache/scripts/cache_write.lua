-- cache_write: replace a tenant's cache entry for a resource (rebuild-cache). The body of a
-- locking.FencedScript: its prelude has refused a stale token and recorded the fence in KEYS[1].
-- KEYS[1] cache entry (hash: value, version, job_id, built_at, token; its own fence record)
-- ARGV[1] fencing token, ARGV[2] lease owner (both the prelude's), ARGV[3] value, ARGV[4] job id,
-- ARGV[5] now (unix ms)
-- returns the entry's new version
local version = redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSET', KEYS[1], 'value', ARGV[3], 'job_id', ARGV[4], 'built_at', ARGV[5], 'token', ARGV[1])
return version
