-- history: finished jobs copied from Redis, so Redis can let them go early (a short
-- JOB_RETENTION) while their record and timeline stay for audit. One row per job; a job that ends
-- again after a replay replaces its row.
CREATE TABLE IF NOT EXISTS jobguard_job_history (
    job_id      text        PRIMARY KEY,
    tenant      text        NOT NULL,
    type        text        NOT NULL,
    status      text        NOT NULL,
    finished_at timestamptz,
    record      jsonb       NOT NULL,
    timeline    jsonb       NOT NULL,
    copied_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS jobguard_job_history_tenant ON jobguard_job_history (tenant, finished_at DESC);
