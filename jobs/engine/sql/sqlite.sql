-- The attempt transitions on SQLite (3.35+, RETURNING): two statements each, in one
-- IMMEDIATE transaction (jobs.engine.backends.sqlite). Same conditions and columns as
-- postgres.sql ({fragments} from shared.sql); datetimes are naive UTC text, the job id
-- 32 hex digits; leases maps each kind to its lease's end, computed in Python (SQLite's
-- date functions keep milliseconds only).

-- name: _started_at
MAX(%(now)s, COALESCE(enqueued_at, %(now)s))

-- name: _lease
json_extract(%(leases)s, '$."' || kind || '"')

-- name: _finished_epoch
(julianday(p.finished_at) - 2440587.5) * 86400.0

-- name: _result
%(j_result)s

-- name: start_job
UPDATE jobs_job
SET {start_job_set}
WHERE {start_job_where}
      AND {not_paused}
RETURNING *

-- name: start_job_limited
-- start_job, used while some kind has a concurrency limit or a rate: a job of a limited kind
-- takes the general path, which counts under the IMMEDIATE transaction's writer lock.
UPDATE jobs_job
SET {start_job_set}
WHERE {start_job_where}
      AND {not_paused}
      AND json_extract(%(limits)s, '$."' || kind || '"') IS NULL
      AND json_extract(%(rates)s, '$."' || kind || '"') IS NULL
RETURNING *

-- name: start_attempt
INSERT INTO jobs_attempt ({attempt_columns})
VALUES (%(job_id)s, %(number)s, %(hostname)s, %(pid)s, %(started)s, NULL, '', '', '', '',
        %(rss)s, NULL, NULL, '')
RETURNING id

-- name: finish_job
UPDATE jobs_job
SET {finish_job_set}
WHERE {finish_job_where}
RETURNING *

-- name: finish_attempt
UPDATE jobs_attempt
SET {finish_attempt_set}
WHERE job_id = %(job_id)s AND number = %(number)s
RETURNING id, worker_hostname, worker_pid, started_at, rss_before_bytes,
          retry_delay_seconds, trace_id
