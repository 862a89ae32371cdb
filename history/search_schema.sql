-- search_schema: the history searchable as the Redis index is (GET /jobs?tag=): the job's tags as
-- an array, backfilled from the record's tags field (joined by ',') for rows copied before this
-- step, and a GIN index for tags && (any) and tags @> (all).
ALTER TABLE jobguard_job_history ADD COLUMN IF NOT EXISTS tags text[] NOT NULL DEFAULT '{}';
UPDATE jobguard_job_history SET tags = string_to_array(record ->> 'tags', ',')
WHERE record ? 'tags' AND record ->> 'tags' <> '' AND tags = '{}';
CREATE INDEX IF NOT EXISTS jobguard_job_history_tags ON jobguard_job_history USING gin (tags);
