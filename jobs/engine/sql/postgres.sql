-- The attempt transitions as one PostgreSQL statement each (jobs.engine.backends.postgres).
-- Parameters are named (%(name)s), as Django's raw queries take them; {fragments} come
-- from shared.sql; jobs.engine.sql builds the finish's parameters from
-- jobs.engine.changes.ending.

-- name: _started_at
GREATEST(%(now)s, enqueued_at)

-- name: _lease
%(now)s + make_interval(secs => (%(leases)s::jsonb ->> kind)::float8)

-- name: _finished_epoch
extract(epoch FROM p.finished_at)::float8

-- name: _result
%(j_result)s::jsonb

-- name: start
-- queued with attempts_made = number - 1 -> running, the lease taken (the kind's lease in
-- leases, {kind: seconds}), the Attempt row inserted; a retry only when the retry budget
-- counted it where it starts (its due time in [due_from, due_to]).
WITH j AS (
    UPDATE jobs_job
    SET {start_job_set}
    WHERE {start_job_where}
    RETURNING jobs_job.*
), a AS (
    INSERT INTO jobs_attempt ({attempt_columns})
    SELECT j.id, %(number)s, %(hostname)s, %(pid)s, GREATEST(%(now)s, j.enqueued_at), NULL, '',
           '', '', '', %(rss)s, NULL, NULL, ''
    FROM j
    RETURNING id, started_at
)
SELECT j.*, a.id AS jobs_attempt_id, a.started_at AS jobs_attempt_started_at FROM j, a

-- name: finish
-- running this attempt, unfinished -> the attempt's end and the job's next status, written
-- together; set_<column> says whether the change sets that column.
WITH j AS (
    UPDATE jobs_job
    SET {finish_job_set}
    WHERE {finish_job_where}
    RETURNING jobs_job.*
), a AS (
    UPDATE jobs_attempt
    SET {finish_attempt_set}
    WHERE job_id = %(job_id)s AND number = %(number)s AND EXISTS (SELECT 1 FROM j)
    RETURNING id AS a_id, worker_hostname AS a_worker_hostname, worker_pid AS a_worker_pid,
              started_at AS a_started_at, rss_before_bytes AS a_rss_before_bytes,
              retry_delay_seconds AS a_retry_delay_seconds, trace_id AS a_trace_id
)
SELECT j.*, a.* FROM j, a
