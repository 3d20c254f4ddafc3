"""SQL text shared by the attempt fast path's PostgreSQL and SQLite statements.

jobs.services.attempt_sql writes the finish as one PostgreSQL statement,
jobs.services.attempt_sql_sqlite as two SQLite statements; both set the same
columns under the same condition, written once here. Parameters are named
(`%(name)s`), as Django's raw queries take them.
"""

from __future__ import annotations

from jobs.models import Attempt, Job

JOB_TABLE = Job._meta.db_table
ATTEMPT_TABLE = Attempt._meta.db_table


def finish_job_set(result: str) -> str:
    """The SET list of the finish's job UPDATE; `result` is the SQL for the result value
    (a cast for PostgreSQL's jsonb, the bare parameter for SQLite's text)."""
    return f"""status = %(status)s,
    result = CASE WHEN %(succeeded)s THEN {result} ELSE result END,
    finished_at = CASE WHEN %(terminal)s THEN %(now)s ELSE finished_at END,
    dead_reason = CASE WHEN %(succeeded)s THEN dead_reason ELSE %(dead_reason)s END,
    next_attempt_at = CASE WHEN %(retrying)s THEN %(next_attempt_at)s ELSE next_attempt_at END,
    last_error = CASE WHEN %(succeeded)s THEN last_error ELSE %(last_error)s END,
    lease_expires_at = NULL,
    waiting_reason = %(waiting_reason)s,
    waiting_detail = %(waiting_detail)s"""


# A job that starts an attempt is no longer waiting (jobs.waiting), and the
# progress of an earlier attempt is not this one's (jobs.progress).
START_NOT_WAITING = """waiting_reason = '',
    waiting_detail = '',
    progress_done = NULL,
    progress_total = NULL,
    progress_message = '',
    progress_at = NULL"""


# The finish applies only while the job runs this attempt and the attempt is unfinished.
FINISH_JOB_WHERE = f"""id = %(job_id)s
    AND status = %(running)s
    AND attempts_made = %(number)s
    AND EXISTS (
        SELECT 1 FROM {ATTEMPT_TABLE}
        WHERE job_id = %(job_id)s AND number = %(number)s AND finished_at IS NULL
    )"""

FINISH_ATTEMPT_SET = """finished_at = %(now)s,
    outcome = %(outcome)s,
    trace_id = CASE WHEN %(trace_id)s <> '' THEN %(trace_id)s
                    WHEN trace_id <> '' THEN trace_id
                    ELSE %(parent_trace_id)s END,
    error_type = %(error_type)s,
    error_message = %(error_message)s,
    traceback = %(traceback)s,
    rss_after_bytes = %(rss)s,
    retry_delay_seconds = CASE WHEN %(retrying)s THEN %(delay)s ELSE retry_delay_seconds END"""


def retry_counted_where(finished_epoch: str) -> str:
    """The start's condition on the previous attempt, for a retry (`number` > 1).

    A retry starts in one statement only when the retry budget already
    counted it where it starts: the previous attempt finished, carries its
    retry delay, and its due time (finish + delay, epoch seconds) lies in
    [%(due_from)s, %(due_to)s] (jobs.budget.admitted_due_range). Anything
    else (a retry that waited into a later window, a lost worker's requeue)
    matches nothing and takes the general path, which asks the budget.
    `finished_epoch` is the database's SQL for `p.finished_at` in epoch
    seconds.
    """
    return f"""(%(number)s = 1 OR EXISTS (
        SELECT 1 FROM {ATTEMPT_TABLE} p
        WHERE p.job_id = {JOB_TABLE}.id
          AND p.number = %(number)s - 1
          AND p.finished_at IS NOT NULL
          AND p.retry_delay_seconds IS NOT NULL
          AND {finished_epoch} + p.retry_delay_seconds BETWEEN %(due_from)s AND %(due_to)s
    ))"""
