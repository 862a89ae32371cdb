-- list_schema: the history's list order, the Redis index's (created ms, then job id, newest first),
-- so GET /jobs continues from the index into SQL by keyset. created_at is the creation time the
-- job id carries (its index score), backfilled from the id for rows copied before this step.
ALTER TABLE jobguard_job_history ADD COLUMN IF NOT EXISTS created_at timestamptz;
UPDATE jobguard_job_history
SET created_at = timestamptz 'epoch' + ('x' || lpad(substr(job_id, 18, 12), 16, '0'))::bit(64)::bigint * interval '1 millisecond'
WHERE created_at IS NULL;
ALTER TABLE jobguard_job_history ALTER COLUMN created_at SET NOT NULL;
CREATE INDEX IF NOT EXISTS jobguard_job_history_list ON jobguard_job_history (tenant, created_at DESC, job_id DESC);
