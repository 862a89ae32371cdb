-- outbox: jobs recorded in the caller's transaction, handed to jobguard by the relay after commit.
-- A row lives from the transaction's commit until the relay has enqueued its job (its id is fixed
-- when the row is written, so a relay that enqueues it twice creates it once).
CREATE TABLE IF NOT EXISTS jobguard_outbox (
    id         bigserial   PRIMARY KEY,
    job_id     text        NOT NULL UNIQUE,
    spec       jsonb       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- A row whose job can never be enqueued (its type is not registered, its spec is invalid) is
    -- set aside here instead of blocking the rows after it.
    dead_at    timestamptz,
    last_error text
);
