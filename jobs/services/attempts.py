"""Starting and finishing attempts: leases, worker loss, the retry policy and budget."""

from __future__ import annotations

import logging
import os
import uuid
from datetime import datetime, timedelta

import psutil
from django.conf import settings
from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from jobs import events
from jobs.kinds import policy_for
from jobs.models import Attempt, AttemptOutcome, DeadReason, Job, JobStatus
from jobs.services.records import RETRYABLE_OUTCOMES, AttemptReport, StartedAttempt, without_nul
from observability import tracing

logger = logging.getLogger(__name__)


def _machine(hostname: str) -> str:
    # Celery node names look like "worker-1@box"; the machine is after the "@".
    return hostname.rpartition("@")[2]


def _attempt_provably_over(previous: Attempt, job: Job, *, now: datetime, hostname: str) -> bool:
    """Whether the attempt `previous` can no longer be running.

    True when its lease has expired, or it ran on this machine in a process
    that is gone, is a zombie, started after the attempt (pid reuse), or is
    this very process (a prefork child runs one task at a time, so a
    redelivery it receives cannot overlap its own earlier attempt).
    """
    if job.lease_expires_at is not None and job.lease_expires_at < now:
        return True
    if not previous.worker_pid or _machine(previous.worker_hostname) != _machine(hostname):
        return False
    if previous.worker_pid == os.getpid():
        return True
    try:
        process = psutil.Process(previous.worker_pid)
        return (
            process.status() == psutil.STATUS_ZOMBIE
            or process.create_time() > previous.started_at.timestamp() + 1
        )
    except psutil.NoSuchProcess:
        return True


def attempt_start(
    *, job_id: uuid.UUID | str, attempt: int, hostname: str, pid: int, rss_bytes: int | None
) -> StartedAttempt | None:
    """Begin the attempt a delivery asks for, or return None to drop it unrun.

    `attempt` is the number the message was published for. Every delivery
    is counted in `Job.deliveries`. A delivery is dropped when the job is
    gone or terminal, the number is stale, or that attempt may still be live
    (one live attempt per job). A redelivery after worker loss starts the
    next attempt: either the parent already recorded the loss (job queued,
    last attempt `worker_lost`), or it could not (the worker's main process
    died too) and the lost attempt is provably over, so it is recorded here.
    """
    now = timezone.now()
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(id=job_id).first()
        if job is None:
            # Usually another deployment sharing this broker and queue name.
            logger.warning(
                "delivery dropped unrun: no job %s in this database (is another stack "
                "consuming the same broker and queue?)",
                job_id,
            )
            return None
        job.deliveries += 1
        job.save(update_fields=["deliveries"])
        if job.is_terminal:
            return _dropped(job, attempt, "terminal")
        number: int | None = None
        if job.status == JobStatus.QUEUED and job.attempts_made == attempt - 1:
            number = attempt
        elif job.status == JobStatus.QUEUED and 0 < attempt <= job.attempts_made:
            # A requeued message keeps the number it was first published for.
            last = job.attempts.filter(number=job.attempts_made).first()
            if last is not None and last.outcome == AttemptOutcome.WORKER_LOST:
                number = job.attempts_made + 1
        elif job.status == JobStatus.RUNNING and 0 < attempt <= job.attempts_made:
            previous = job.attempts.filter(number=job.attempts_made).first()
            if previous is None or not _attempt_provably_over(
                previous, job, now=now, hostname=hostname
            ):
                return _dropped(job, attempt, "live")
            _record_worker_lost(
                job,
                previous,
                now=now,
                requeued=True,
                message="worker lost: the process running this attempt is gone (found on redelivery)",
            )
            if job.status == JobStatus.QUEUED:
                number = job.attempts_made + 1
        if number is None:
            return _dropped(job, attempt, "stale")
        policy = policy_for(job.kind)
        job.status = JobStatus.RUNNING
        job.attempts_made = number
        job.started_at = job.started_at or now
        job.lease_expires_at = now + timedelta(
            seconds=policy.hard_time_limit + settings.JOBS_LEASE_GRACE
        )
        job.save(update_fields=["status", "attempts_made", "started_at", "lease_expires_at"])
        row = Attempt.objects.create(
            job=job,
            number=number,
            worker_hostname=hostname,
            worker_pid=pid,
            started_at=now,
            rss_before_bytes=rss_bytes,
        )
        transaction.on_commit(lambda: events.attempt_started.send(sender=Job, job=job, attempt=row))
    logger.info(
        "attempt started job_id=%s kind=%s attempt=%s trace_id=%s",
        job.id,
        job.kind,
        number,
        tracing.trace_id_from(job.trace_parent),
    )
    return StartedAttempt(
        job_id=job.id,
        kind=job.kind,
        payload=job.payload,
        attempt=number,
        max_attempts=job.max_attempts,
        policy=policy,
        queue=job.queue,
        trace_parent=job.trace_parent,
    )


def _dropped(job: Job, attempt: int, why: str) -> None:
    transaction.on_commit(lambda: events.delivery_dropped.send(sender=Job, job=job, reason=why))
    logger.info(
        "delivery dropped unrun (duplicate suppressed) job_id=%s attempt=%s status=%s reason=%s",
        job.id,
        attempt,
        job.status,
        why,
    )
    return None


def _record_worker_lost(
    job: Job, row: Attempt, *, now: datetime, requeued: bool, message: str
) -> None:
    """Close attempt `row` as worker_lost and decide what follows (job row locked by the caller).

    Dead with reason "poison" once JOBS_POISON_AFTER attempts were lost, dead
    "exhausted" when no attempts remain, otherwise queued again at once
    (no backoff: the loss was the worker's, not necessarily the job's).
    `requeued` says the broker still holds a message for the job (Celery
    requeued it), so nothing must be published.
    """
    job.worker_losses += 1
    job.lease_expires_at = None
    job.last_error = f"WorkerLostError: {message}"[:10_000]
    _close_attempt(
        row,
        AttemptReport(
            outcome=AttemptOutcome.WORKER_LOST, error_type="WorkerLostError", error_message=message
        ),
        now=now,
    )
    if job.worker_losses >= settings.JOBS_POISON_AFTER:
        job.status, job.dead_reason, job.finished_at = JobStatus.DEAD, DeadReason.POISON, now
    elif job.attempts_made >= job.max_attempts:
        job.status, job.dead_reason, job.finished_at = JobStatus.DEAD, DeadReason.EXHAUSTED, now
    else:
        job.status = JobStatus.QUEUED
        job.enqueued_at = now
        job.published_at = now if requeued else None
    job.save(
        update_fields=[
            "status",
            "dead_reason",
            "finished_at",
            "worker_losses",
            "lease_expires_at",
            "last_error",
            "enqueued_at",
            "published_at",
        ]
    )
    if job.is_terminal:
        _completed(job)
    logger.warning(
        "attempt finished job_id=%s kind=%s attempt=%s outcome=worker_lost status=%s losses=%s trace_id=%s: %s",
        job.id,
        job.kind,
        row.number,
        job.status,
        job.worker_losses,
        tracing.trace_id_from(job.trace_parent),
        message,
    )


def attempt_worker_lost(
    *, job_id: uuid.UUID | str, attempt: int, worker_pid: int | None, message: str
) -> bool:
    """Record, from the worker's main process, that the child `worker_pid` died running this job.

    `attempt` is the number the message was first published for; a
    requeued message runs later attempts, so the lost attempt is the job's
    current one when it is unfinished and ran in `worker_pid` (or, with no
    pid known, when its number is not below `attempt`).

    Returns True when the message should go back on the queue (Celery's
    reject_on_worker_lost), False when it must be acknowledged instead:
    the job is now dead (poison or exhausted) or already terminal, so a
    redelivery could only loop.
    """
    now = timezone.now()
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(id=job_id).first()
        if job is None:
            return False
        row = job.attempts.filter(number=job.attempts_made).first()
        ours = (
            row is not None
            and row.finished_at is None
            and (row.worker_pid == worker_pid if worker_pid else row.number >= attempt)
        )
        if job.status == JobStatus.RUNNING and ours:
            _record_worker_lost(job, row, now=now, requeued=True, message=message)
            return job.status == JobStatus.QUEUED
        return not job.is_terminal


def attempt_finish(
    *, job_id: uuid.UUID | str, attempt: int, report: AttemptReport, rss_bytes: int | None = None
) -> str | None:
    """Record how attempt `attempt` ended and move the job on by the retry policy.

    Returns the job's new status, or None when the attempt had already been
    recorded (by the lease sweep, say) or the job has moved on (cancelled).
    """
    now = timezone.now()
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(id=job_id).first()
        if job is None:
            return None
        row = job.attempts.filter(number=attempt).first()
        if row is None or row.finished_at is not None:
            return None
        row.rss_after_bytes = rss_bytes
        if job.status != JobStatus.RUNNING or job.attempts_made != attempt:
            _close_attempt(row, report, now=now)
            return None
        if report.outcome == AttemptOutcome.SUCCEEDED:
            _close_attempt(row, report, now=now)
            job.status = JobStatus.SUCCEEDED
            job.result = without_nul(report.result)
            job.finished_at = now
            job.lease_expires_at = None
            job.save(update_fields=["status", "result", "finished_at", "lease_expires_at"])
            _completed(job)
        else:
            _record_failure(job, row, report, now=now)
    logger.info(
        "attempt finished job_id=%s kind=%s attempt=%s outcome=%s status=%s trace_id=%s",
        job.id,
        job.kind,
        attempt,
        report.outcome,
        job.status,
        report.trace_id or tracing.trace_id_from(job.trace_parent),
    )
    return job.status


def _close_attempt(row: Attempt, report: AttemptReport, *, now: datetime) -> None:
    # Sent after commit, when `row.job` holds the job's final state.
    transaction.on_commit(
        lambda: events.attempt_finished.send(sender=Job, job=row.job, attempt=row)
    )
    row.finished_at = now
    row.outcome = report.outcome
    row.trace_id = report.trace_id or row.trace_id
    row.error_type = without_nul(report.error_type[:255])
    row.error_message = without_nul(report.error_message[:10_000])
    row.traceback = without_nul(report.traceback[-20_000:])
    row.save()


def _completed(job: Job) -> None:
    transaction.on_commit(lambda: events.job_completed.send(sender=Job, job=job))


def _record_failure(job: Job, row: Attempt, report: AttemptReport, *, now: datetime) -> None:
    """Close a failed attempt and send the job to `retrying` or `dead` by its policy."""
    policy = policy_for(job.kind)
    job.last_error = without_nul(f"{report.error_type}: {report.error_message}"[:10_000])
    job.lease_expires_at = None
    retryable = report.retryable and report.outcome in RETRYABLE_OUTCOMES
    if not retryable:
        job.status, job.dead_reason, job.finished_at = JobStatus.DEAD, DeadReason.ERROR, now
    elif job.attempts_made >= job.max_attempts:
        job.status, job.dead_reason, job.finished_at = JobStatus.DEAD, DeadReason.EXHAUSTED, now
    else:
        delay = policy.retry_delay(job.attempts_made, retry_after=report.retry_after)
        if not _retry_budget_allows(job, now=now):
            # Past the budget a retry waits out the window instead of adding to the storm.
            delay = max(delay, settings.JOBS_RETRY_BUDGET_WINDOW)
            transaction.on_commit(lambda: events.retry_budget_exhausted.send(sender=Job, job=job))
        row.retry_delay_seconds = delay
        job.status = JobStatus.RETRYING
        job.next_attempt_at = now + timedelta(seconds=delay)
    _close_attempt(row, report, now=now)
    job.save(
        update_fields=[
            "status",
            "dead_reason",
            "finished_at",
            "next_attempt_at",
            "last_error",
            "lease_expires_at",
        ]
    )
    if job.is_terminal:
        _completed(job)


def _retry_budget_allows(job: Job, *, now: datetime) -> bool:
    """Whether the job's kind may schedule one more retry now.

    Retry budget (DESIGN.md "Retries"; after the client-side retry budgets
    of Google's SRE book, ch. 22): over the last JOBS_RETRY_BUDGET_WINDOW
    seconds, retries started may not exceed JOBS_RETRY_BUDGET_RATIO times
    the first attempts started, plus JOBS_RETRY_BUDGET_FLOOR.
    """
    since = now - timedelta(seconds=settings.JOBS_RETRY_BUDGET_WINDOW)
    counts = Attempt.objects.filter(job__kind=job.kind, started_at__gte=since).aggregate(
        first=Count("id", filter=Q(number=1)), retries=Count("id", filter=Q(number__gt=1))
    )
    allowed = settings.JOBS_RETRY_BUDGET_RATIO * counts["first"] + settings.JOBS_RETRY_BUDGET_FLOOR
    return counts["retries"] < allowed


def attempt_interrupted(
    *, job_id: uuid.UUID | str, attempt: int, outcome: AttemptOutcome, message: str
) -> str | None:
    """Record an attempt ended from outside its process (hard time limit, worker lost).

    Returns the job's new status, or None when nothing was left to record.
    """
    report = AttemptReport(
        outcome=outcome, error_type=outcome.label.replace(" ", ""), error_message=message
    )
    return attempt_finish(job_id=job_id, attempt=attempt, report=report)
