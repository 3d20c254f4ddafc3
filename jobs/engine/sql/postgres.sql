-- The attempt transitions as one PostgreSQL statement each (jobs.engine.backends.postgres).
-- Parameters are named (%(name)s), as Django's raw queries take them; {fragments} come
-- from shared.sql; jobs.engine.sql builds the finish's parameters from
-- jobs.engine.changes.ending.

-- name: _started_at
GREATEST(%(now)s, enqueued_at)

-- name: _lease
%(now)s + make_interval(secs => (%(leases)s::jsonb ->> kind)::float8)

-- name: _lease_fused
-- _lease while some kind has a fuse (jobs.engine.sql.queries(fused=True)): such a kind has its
-- lease negated in the map (jobs.engine.backends.postgres.leases) and has a lease only while
-- none of its fuses is open or half-open (a probe of the Fuse table's (kind, destination)
-- index); else NULL, and the general path judges the job against its destination's fuse
-- (jobs.engine.fusing). Any other kind takes the first branch: its lease as in _lease.
CASE WHEN (%(leases)s::jsonb ->> kind)::float8 >= 0
     THEN %(now)s + make_interval(secs => (%(leases)s::jsonb ->> kind)::float8)
     WHEN (SELECT count(*) FROM jobs_fuse fz
           WHERE fz.kind = jobs_job.kind AND fz.state <> 'closed') = 0
     THEN %(now)s + make_interval(secs => -(%(leases)s::jsonb ->> kind)::float8)
END

-- name: _finished_epoch
extract(epoch FROM p.finished_at)::float8

-- name: _result
%(j_result)s::jsonb

-- name: part_start_attempt
-- The end of both start statements: the job row updated by `j` gets its Attempt row.
RETURNING jobs_job.*
), a AS (
    INSERT INTO jobs_attempt ({attempt_columns})
    SELECT j.id, %(number)s, %(hostname)s, %(pid)s, GREATEST(%(now)s, j.enqueued_at), NULL, '',
           '', '', '', %(rss)s, NULL, NULL, ''
    FROM j
    RETURNING id, started_at
)
SELECT j.*, a.id AS jobs_attempt_id, a.started_at AS jobs_attempt_started_at FROM j, a

-- name: start
-- queued with attempts_made = number - 1 -> running, the lease taken (the kind's lease in
-- leases, {kind: seconds}), the Attempt row inserted; a retry only when the retry budget
-- counted it where it starts (its due time in [due_from, due_to]).
WITH j AS (
    UPDATE jobs_job
    SET {start_job_set}
    WHERE {start_job_where}
      AND {not_paused}
    {part_start_attempt}

-- name: start_limited
-- start, used while some kind has a concurrency limit (limits: {kind: {n, path}}) or a rate
-- (rates: {kind: {t, b, path}}): a job of a limited kind starts only when
-- jobs_concurrency_admit (jobs.concurrency_sql) finds a slot and jobs_rate_admit
-- (jobs.rate_sql) finds its place (a job never held) and a conforming GCRA bucket, each judged under the
-- (kind, key) advisory lock it takes; else the general path holds it. An unlimited kind's
-- job is judged true at once, without the locks.
WITH j AS (
    UPDATE jobs_job
    SET {start_job_set}
    WHERE {start_job_where}
      AND {not_paused}
      AND jobs_concurrency_admit(jobs_job.id, jobs_job.kind, jobs_job.payload,
                                 jobs_job.enqueued_at, %(limits)s::jsonb)
      AND jobs_rate_admit(jobs_job.id, jobs_job.kind, jobs_job.payload, jobs_job.enqueued_at,
                          jobs_job.waiting_reason, GREATEST(%(now)s, jobs_job.enqueued_at),
                          %(rates)s::jsonb)
    {part_start_attempt}

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

-- name: finish_limited
-- finish, used while some kind has a concurrency limit (limits: {kind: {n, path}}): also says
-- whether a job of the finished job's limited kind waits for a slot (a_waiting; one probe of
-- the partial index jobs_job_concurrency_idx, none for an unlimited kind), so the slot is
-- handed off at once (jobs.engine.limiting.hand_off) and not at the leader's next tick.
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
SELECT j.*, a.*,
       CASE WHEN (%(limits)s::jsonb -> j.kind) IS NOT NULL THEN EXISTS (
           SELECT 1 FROM jobs_job w
           WHERE w.kind = j.kind AND w.status = 'queued' AND w.waiting_reason = 'concurrency_limit'
       ) ELSE false END AS a_waiting
FROM j, a
