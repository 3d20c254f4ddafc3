"""Finishing attempts (a façade over the engine: jobs.engine.Engine.finish) and reading one back."""

from __future__ import annotations

import uuid

from jobs import engine
from jobs.decisions import Action, Decision
from jobs.engine.values import AttemptEnd, AttemptRef, AttemptReport, StartedAttempt
from jobs.models import AttemptOutcome, Job, JobStatus


def attempt_finish(
    *,
    job_id: uuid.UUID | str,
    attempt: int,
    report: AttemptReport,
    rss_bytes: int | None = None,
    started: StartedAttempt | None = None,
) -> AttemptEnd:
    """Record how attempt `attempt` ended and move the job on by the one retry decision.

    `started` is what attempt_start returned, when the caller ran the
    attempt: with it, the common case is one statement. See Engine.finish.
    """
    ref = AttemptRef(job_id=job_id, number=attempt, started=started, rss_bytes=rss_bytes)
    return engine.current().finish(ref, report)


def attempt_interrupted(
    *,
    job_id: uuid.UUID | str,
    attempt: int,
    outcome: AttemptOutcome,
    message: str,
    error_type: str = "",
    rss_bytes: int | None = None,
) -> AttemptEnd:
    """Record an attempt ended from outside its process (hard time limit, worker lost).

    `error_type` names the exception as Celery raised it (e.g.
    "TimeLimitExceeded"); it defaults to the outcome's label. `rss_bytes` is
    the child's resident memory when it was stopped, if read. Returns what
    attempt_finish returns.
    """
    report = AttemptReport(
        outcome=outcome,
        error_type=error_type or outcome.label.replace(" ", ""),
        error_message=message,
    )
    return attempt_finish(job_id=job_id, attempt=attempt, report=report, rss_bytes=rss_bytes)


def attempt_memory_limit_end(
    *, job_id: uuid.UUID | str, worker_pid: int | None
) -> AttemptEnd | None:
    """How the attempt that child `worker_pid` ended for a hard memory limit was recorded, or None.

    Read by the worker's main process after that child exited
    (jobs.memory_guard.MEMORY_LIMIT_EXIT_CODE): the child recorded the
    outcome and the one retry decision (attempt_finish) before it exited;
    this reads them back (job dead with its reason, or retrying after the
    attempt's retry delay) for the Celery state, and decides nothing. None
    when no such attempt is recorded (the child exited before it could be).
    """
    job = Job.objects.filter(id=job_id).first()
    if job is None or not worker_pid:
        return None
    row = (
        job.attempts.filter(worker_pid=worker_pid, outcome=AttemptOutcome.MEMORY_LIMIT)
        .order_by("-number")
        .first()
    )
    if row is None:
        return None
    if job.status == JobStatus.DEAD and job.attempts_made == row.number:
        decision = Decision(Action.DEAD, dead_reason=job.dead_reason)
    else:
        decision = Decision(Action.RETRY, delay_seconds=row.retry_delay_seconds or 0.0)
    return AttemptEnd.after(job, row.number, AttemptOutcome.MEMORY_LIMIT, decision)
