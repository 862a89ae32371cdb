-- sqlfence: the fence table. One row per resource: the highest fencing token that wrote it, and
-- that token's owner. A write under a lower token, or the same token from another owner, is
-- refused (Write); the row is locked by the writer's transaction until it commits.
CREATE TABLE IF NOT EXISTS jobguard_fences (
    resource   text        PRIMARY KEY,
    token      bigint      NOT NULL CHECK (token > 0),
    owner      text        NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now()
);
