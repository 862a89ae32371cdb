-- write: record a fence for a resource if it may write: no fence yet, a lower token, or the same
-- token and owner again (a retried write). $1 resource, $2 token, $3 owner. Returns one row (the
-- token) when the fence may write; none when a higher token, or the same token from another
-- owner, wrote the resource (nothing changes).
INSERT INTO jobguard_fences AS f (resource, token, owner) VALUES ($1, $2, $3)
ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, owner = EXCLUDED.owner, written_at = now()
    WHERE f.token < EXCLUDED.token OR (f.token = EXCLUDED.token AND f.owner = EXCLUDED.owner)
RETURNING token
