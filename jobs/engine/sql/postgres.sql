-- The attempt transitions as one PostgreSQL statement each (jobs.engine.backends.postgres).
-- Parameters are named (%(name)s), as Django's raw queries take them; jobs.engine.sql
-- builds the finish's parameters from jobs.engine.changes.ending.

-- name: start
-- queued with attempts_made = number - 1 -> running, the lease taken (the kind's lease in
-- %(leases)s, {kind: seconds}), the Attempt row inserted; a retry only when the retry
-- budget counted it where it starts (its due time in [%(due_from)s, %(due_to)s]).
WITH j AS (
    UPDATE jobs_job
    SET deliveries = deliveries + 1,
        status = %(running)s,
        attempts_made = %(number)s,
        started_at = COALESCE(started_at, GREATEST(%(now)s, enqueued_at)),
        lease_expires_at = %(now)s + make_interval(secs => (%(leases)s::jsonb ->> kind)::float8),
        waiting_reason = '',
        waiting_detail = '',
        progress_done = NULL,
        progress_total = NULL,
        progress_message = '',
        progress_at = NULL
    WHERE id = %(job_id)s
      AND status = %(queued)s
      AND attempts_made = %(number)s - 1
      AND %(leases)s::jsonb ? kind
      AND (%(number)s = 1 OR EXISTS (
          SELECT 1 FROM jobs_attempt p
          WHERE p.job_id = jobs_job.id
            AND p.number = %(number)s - 1
            AND p.finished_at IS NOT NULL
            AND p.retry_delay_seconds IS NOT NULL
            AND extract(epoch FROM p.finished_at)::float8 + p.retry_delay_seconds
                BETWEEN %(due_from)s AND %(due_to)s
      ))
    RETURNING jobs_job.*
), a AS (
    INSERT INTO jobs_attempt (
        job_id, number, worker_hostname, worker_pid, started_at, finished_at, outcome,
        error_type, error_message, traceback, rss_before_bytes, rss_after_bytes,
        retry_delay_seconds, trace_id
    )
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
    SET status = %(j_status)s,
        result = CASE WHEN %(set_j_result)s THEN %(j_result)s::jsonb ELSE result END,
        finished_at = CASE WHEN %(set_j_finished_at)s THEN %(j_finished_at)s ELSE finished_at END,
        dead_reason = CASE WHEN %(set_j_dead_reason)s THEN %(j_dead_reason)s ELSE dead_reason END,
        next_attempt_at = CASE WHEN %(set_j_next_attempt_at)s THEN %(j_next_attempt_at)s
                               ELSE next_attempt_at END,
        last_error = CASE WHEN %(set_j_last_error)s THEN %(j_last_error)s ELSE last_error END,
        lease_expires_at = NULL,
        waiting_reason = %(j_waiting_reason)s,
        waiting_detail = %(j_waiting_detail)s
    WHERE id = %(job_id)s
      AND status = %(running)s
      AND attempts_made = %(number)s
      AND EXISTS (
          SELECT 1 FROM jobs_attempt
          WHERE job_id = %(job_id)s AND number = %(number)s AND finished_at IS NULL
      )
    RETURNING jobs_job.*
), a AS (
    UPDATE jobs_attempt
    SET finished_at = %(a_finished_at)s,
        outcome = %(a_outcome)s,
        trace_id = CASE WHEN %(trace_id)s <> '' THEN %(trace_id)s
                        WHEN trace_id <> '' THEN trace_id
                        ELSE %(parent_trace_id)s END,
        error_type = %(a_error_type)s,
        error_message = %(a_error_message)s,
        traceback = %(a_traceback)s,
        rss_after_bytes = %(rss)s,
        retry_delay_seconds = CASE WHEN %(set_a_retry_delay_seconds)s
                                   THEN %(a_retry_delay_seconds)s ELSE retry_delay_seconds END
    WHERE job_id = %(job_id)s AND number = %(number)s AND EXISTS (SELECT 1 FROM j)
    RETURNING id AS a_id, worker_hostname AS a_worker_hostname, worker_pid AS a_worker_pid,
              started_at AS a_started_at, rss_before_bytes AS a_rss_before_bytes,
              retry_delay_seconds AS a_retry_delay_seconds, trace_id AS a_trace_id
)
SELECT j.*, a.* FROM j, a
