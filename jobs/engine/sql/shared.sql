-- Fragments both dialects' statements share (jobs.engine.sql fills each dialect's
-- {placeholders} from its own `_`-named sections, then the statements' {fragments}).

-- name: start_job_set
deliveries = deliveries + 1,
        status = %(running)s,
        attempts_made = %(number)s,
        started_at = COALESCE(started_at, {_started_at}),
        lease_expires_at = {_lease},
        waiting_reason = '',
        waiting_detail = '',
        progress_done = NULL,
        progress_total = NULL,
        progress_message = '',
        progress_at = NULL

-- name: start_job_where
id = %(job_id)s
      AND status = %(queued)s
      AND attempts_made = %(number)s - 1
      AND {_lease} IS NOT NULL
      AND (%(number)s = 1 OR EXISTS (
          SELECT 1 FROM jobs_attempt p
          WHERE p.job_id = jobs_job.id
            AND p.number = %(number)s - 1
            AND p.finished_at IS NOT NULL
            AND p.retry_delay_seconds IS NOT NULL
            AND {_finished_epoch} + p.retry_delay_seconds BETWEEN %(due_from)s AND %(due_to)s
      ))

-- name: not_paused
-- Neither the job's kind nor its queue is paused (jobs.pauses; docs/flow-control.md). A
-- scalar subquery, not NOT EXISTS (which PostgreSQL may turn into an anti join, and so into
-- another plan for finding the job): it stays a filter on the one row found, a SubPlan
-- reading the Pause table, 1-2 us when it is empty. A paused job fails the start and takes
-- the general path, which holds it (jobs.engine.pausing).
(
          SELECT count(*) FROM jobs_pause pz
          WHERE (pz.scope = 'kind' AND pz.name = jobs_job.kind)
             OR (pz.scope = 'queue' AND pz.name = jobs_job.queue)
      ) = 0

-- name: attempt_columns
job_id, number, worker_hostname, worker_pid, started_at, finished_at, outcome,
        error_type, error_message, traceback, rss_before_bytes, rss_after_bytes,
        retry_delay_seconds, trace_id

-- name: finish_job_set
status = %(j_status)s,
        result = CASE WHEN %(set_j_result)s THEN {_result} ELSE result END,
        finished_at = CASE WHEN %(set_j_finished_at)s THEN %(j_finished_at)s ELSE finished_at END,
        dead_reason = CASE WHEN %(set_j_dead_reason)s THEN %(j_dead_reason)s ELSE dead_reason END,
        next_attempt_at = CASE WHEN %(set_j_next_attempt_at)s THEN %(j_next_attempt_at)s
                               ELSE next_attempt_at END,
        last_error = CASE WHEN %(set_j_last_error)s THEN %(j_last_error)s ELSE last_error END,
        lease_expires_at = NULL,
        waiting_reason = %(j_waiting_reason)s,
        waiting_detail = %(j_waiting_detail)s

-- name: finish_job_where
id = %(job_id)s
      AND status = %(running)s
      AND attempts_made = %(number)s
      AND EXISTS (
          SELECT 1 FROM jobs_attempt
          WHERE job_id = %(job_id)s AND number = %(number)s AND finished_at IS NULL
      )

-- name: finish_attempt_set
finished_at = %(a_finished_at)s,
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
