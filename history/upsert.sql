-- upsert: a finished job's record and timeline. $1 job id, $2 tenant, $3 type, $4 status,
-- $5 finished at, $6 record (JSON object of the hash's fields), $7 timeline (JSON array,
-- each event with its seq), $8 created at (the creation time the job id carries: the list's order),
-- $9 tags (text[], empty for none).
-- A copy replaces the row only when its last event is not older than the row's: two processes may
-- copy one job (the cancel's and the late answer's), and the copy read first must not win by
-- committing last.
INSERT INTO jobguard_job_history (job_id, tenant, type, status, finished_at, record, timeline, created_at, tags)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (job_id) DO UPDATE SET tenant = EXCLUDED.tenant, type = EXCLUDED.type, status = EXCLUDED.status,
    finished_at = EXCLUDED.finished_at, record = EXCLUDED.record, timeline = EXCLUDED.timeline,
    created_at = EXCLUDED.created_at, tags = EXCLUDED.tags, copied_at = now()
WHERE COALESCE((EXCLUDED.timeline -> -1 ->> 'seq')::bigint, -1)
   >= COALESCE((jobguard_job_history.timeline -> -1 ->> 'seq')::bigint, -1)
