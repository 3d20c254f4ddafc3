"""Finishing attempts: the outcome, the one retry decision and the job's next status."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta

from django.db import transaction

from jobs import clock, events, waiting
from jobs.decisions import Action, Decision
from jobs.kinds import policy_for
from jobs.models import Attempt, AttemptOutcome, Job, JobStatus
from jobs.services import attempt_sql
from jobs.services.attempt_close import (
    close_attempt,
    decide_failure,
    job_completed,
    log_decision,
    savepoint_if_nested,
)
from jobs.services.records import AttemptEnd, AttemptReport, StartedAttempt, without_nul
from observability import tracing

logger = logging.getLogger(__name__)


def attempt_finish(
    *,
    job_id: uuid.UUID | str,
    attempt: int,
    report: AttemptReport,
    rss_bytes: int | None = None,
    started: StartedAttempt | None = None,
) -> AttemptEnd:
    """Record how attempt `attempt` ended and move the job on by the one retry decision.

    Returns an AttemptEnd whose `status` is the job's new status, or None
    when the attempt had already been recorded (by the lease sweep, say) or
    the job has moved on (cancelled); `decision` is the verdict on a failed
    attempt (jobs.decisions). `started` is what attempt_start returned, when
    the caller ran the attempt: with it, the common case is one statement
    (jobs.services.attempt_sql). Raises the database's errors.
    """
    now = clock.now()
    if started is not None and attempt_sql.enabled():
        end = _finish_in_one_statement(started, attempt, report, rss_bytes, now=now)
        if end is not None:
            return end
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(id=job_id).first()
        if job is None:
            return AttemptEnd(status=None, outcome=report.outcome)
        row = job.attempts.filter(number=attempt).first()
        if row is None or row.finished_at is not None:
            return AttemptEnd(status=None, job_status=job.status, outcome=report.outcome)
        row.rss_after_bytes = rss_bytes
        if job.status != JobStatus.RUNNING or job.attempts_made != attempt:
            close_attempt(row, report, now=now)
            return AttemptEnd(status=None, job_status=job.status, outcome=report.outcome)
        decision = None
        if report.outcome == AttemptOutcome.SUCCEEDED:
            close_attempt(row, report, now=now)
            job.status = JobStatus.SUCCEEDED
            job.result = without_nul(report.result)
            job.finished_at = now
            job.lease_expires_at = None
            job.save(update_fields=["status", "result", "finished_at", "lease_expires_at"])
            job_completed(job)
        else:
            decision = _record_failure(job, row, report, now=now)
    return _finished(job, attempt, report, decision)


def _finished(
    job: Job, attempt: int, report: AttemptReport, decision: Decision | None
) -> AttemptEnd:
    if logger.isEnabledFor(logging.INFO):
        logger.info(
            "attempt finished job_id=%s kind=%s attempt=%s outcome=%s status=%s trace_id=%s",
            job.id,
            job.kind,
            attempt,
            report.outcome,
            job.status,
            report.trace_id or tracing.trace_id_from(job.trace_parent),
        )
    return AttemptEnd(
        status=job.status,
        job_status=job.status,
        decision=decision,
        outcome=report.outcome,
        next_attempt_at=job.next_attempt_at if job.status == JobStatus.RETRYING else None,
        attempt=attempt,
        max_attempts=job.max_attempts,
    )


def _finish_in_one_statement(
    started: StartedAttempt,
    attempt: int,
    report: AttemptReport,
    rss_bytes: int | None,
    *,
    now: datetime,
) -> AttemptEnd | None:
    """attempt_finish's common case: the job is running this attempt, unfinished.

    The one retry decision is made first, from what the attempt started
    with (the job was running attempt `attempt` of `started.max_attempts`
    under `started.policy`), then written with the outcome, the attempt row
    and the job row in one conditional statement. Returns None when the
    condition did not hold (nothing written; the general path decides).
    """
    decision: Decision | None = None
    status = JobStatus.SUCCEEDED
    next_attempt_at = None
    if report.outcome != AttemptOutcome.SUCCEEDED:
        decision = decide_failure(
            kind=started.kind,
            policy=started.policy,
            report=report,
            attempts_made=attempt,
            max_attempts=started.max_attempts,
            now=now,
        )
        if decision.action == Action.DEAD:
            status = JobStatus.DEAD
        else:
            status = JobStatus.RETRYING
            next_attempt_at = now + timedelta(seconds=decision.delay_seconds)
    with savepoint_if_nested():
        done = attempt_sql.finish(
            job_id=started.job_id,
            number=attempt,
            report=report,
            rss_bytes=rss_bytes,
            now=now,
            status=status,
            decision=decision,
            next_attempt_at=next_attempt_at,
            parent_trace_id=tracing.trace_id_from(started.trace_parent),
        )
    if done is None:
        return None
    job, row = done
    # As in the general path: sent after commit, the decision with the event.
    transaction.on_commit(
        lambda: events.attempt_finished.send(sender=Job, job=job, attempt=row, decision=decision)
    )
    if decision is not None:
        log_decision(job, attempt, report.outcome, decision, job.last_error)
    if job.is_terminal:
        job_completed(job)
    return _finished(job, attempt, report, decision)


def _record_failure(job: Job, row: Attempt, report: AttemptReport, *, now: datetime) -> Decision:
    """Close a failed attempt and send the job to `retrying` or `dead` by the one decision."""
    job.last_error = without_nul(f"{report.error_type}: {report.error_message}"[:10_000])
    job.lease_expires_at = None
    decision = decide_failure(
        kind=job.kind,
        policy=policy_for(job.kind),
        report=report,
        attempts_made=job.attempts_made,
        max_attempts=job.max_attempts,
        now=now,
    )
    if decision.action == Action.DEAD:
        job.status, job.dead_reason, job.finished_at = JobStatus.DEAD, decision.dead_reason, now
    else:
        row.retry_delay_seconds = decision.delay_seconds
        job.status = JobStatus.RETRYING
        job.next_attempt_at = now + timedelta(seconds=decision.delay_seconds)
    close_attempt(row, report, now=now, decision=decision)
    job.save(
        update_fields=[
            "status",
            "dead_reason",
            "finished_at",
            "next_attempt_at",
            "last_error",
            "lease_expires_at",
            *waiting.apply(job, decision.waiting),
        ]
    )
    if job.is_terminal:
        job_completed(job)
    log_decision(job, row.number, report.outcome, decision, job.last_error)
    return decision


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
    return AttemptEnd(
        status=job.status,
        job_status=job.status,
        decision=decision,
        outcome=AttemptOutcome.MEMORY_LIMIT,
        next_attempt_at=job.next_attempt_at,
        attempt=row.number,
        max_attempts=job.max_attempts,
    )
