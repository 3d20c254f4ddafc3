"""Starting attempts: one live attempt per job, redeliveries after a lost worker, held retries."""

from __future__ import annotations

import logging
import os
import time
import uuid
from datetime import UTC, datetime, timedelta

import psutil
from django.conf import settings
from django.db import transaction

from jobs import budget, clock, events, pause_gate, waiting
from jobs.kinds import policy_for
from jobs.models import Attempt, AttemptOutcome, DeadReason, Job, JobStatus
from jobs.policy import Policy
from jobs.reasons import DropReason
from jobs.services import attempt_sql
from jobs.services.attempt_close import job_completed, log_budget_exhausted, savepoint_if_nested
from jobs.services.records import StartedAttempt
from jobs.services.worker_loss import record_worker_lost
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
        # DB time on both sides: the process's start is `now` (the database's
        # clock) less its age, an interval measured on this host's own clock.
        started = now.timestamp() - (time.time() - process.create_time())
        return (
            process.status() == psutil.STATUS_ZOMBIE
            or started > previous.started_at.timestamp() + 1
        )
    except psutil.NoSuchProcess:
        return True


def attempt_start(
    *,
    job_id: uuid.UUID | str,
    attempt: int,
    hostname: str,
    pid: int,
    rss_bytes: int | None,
    resume: bool = False,
) -> StartedAttempt | None:
    """Begin the attempt a delivery asks for, or return None to drop it unrun.

    `attempt` is the number the message was published for. Every delivery
    is counted in `Job.deliveries`. A delivery is dropped when the job is
    gone or terminal, the number is stale, or that attempt may still be live
    (one live attempt per job). A redelivery after worker loss starts the
    next attempt: either the parent already recorded the loss (job queued,
    last attempt `worker_lost`), or it could not (the worker's main process
    died too) and the lost attempt is provably over, so it is recorded here.

    `resume` is for a retry of this very call after a lost connection (the
    first try may have committed): an unfinished attempt already started by
    this process for this message is returned as the started attempt.
    """
    now = clock.now()
    if not resume and attempt_sql.enabled():
        # The common case in one statement (jobs.services.attempt_sql): a first
        # attempt, or a retry the budget counted in the window it starts in
        # (budget.admit would pass it unasked). Any other case falls through.
        with savepoint_if_nested():
            fast = attempt_sql.start(
                job_id=job_id,
                number=attempt,
                hostname=hostname,
                pid=pid,
                rss_bytes=rss_bytes,
                now=now,
                due_range=budget.admitted_due_range(now.timestamp()),
            )
        if fast is not None:
            began, row = fast
            policy = policy_for(began.kind)
            transaction.on_commit(
                lambda: events.attempt_started.send(sender=Job, job=began, attempt=row)
            )
            if attempt == 1:
                # The retry budget's denominator, as in the general path.
                transaction.on_commit(lambda: budget.record_first(began.kind, now=now.timestamp()))
            _log_started(began, attempt)
            return _started(began, attempt, policy)
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
        if resume and job.status == JobStatus.RUNNING and job.attempts_made >= attempt:
            mine = job.attempts.filter(
                number=job.attempts_made, worker_pid=pid, worker_hostname=hostname
            ).first()
            if mine is not None and mine.finished_at is None:
                return _started(job, mine.number)
        job.deliveries += 1
        job.save(update_fields=["deliveries"])
        if job.is_terminal:
            _dropped(job, attempt, DropReason.TERMINAL)
            return None
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
                _dropped(job, attempt, DropReason.LIVE)
                return None
            record_worker_lost(
                job,
                previous,
                now=now,
                requeued=True,
                message="worker lost: the process running this attempt is gone (found on redelivery)",
            )
            if job.status == JobStatus.QUEUED:
                number = job.attempts_made + 1
        if number is None:
            _dropped(job, attempt, DropReason.STALE)
            return None
        if pause_gate.hold_if_paused(job):
            _dropped(job, attempt, DropReason.PAUSED)
            return None
        if number > 1 and _held_by_retry_budget(job, number, now=now):
            _dropped(job, attempt, DropReason.BUDGET)
            return None
        policy = policy_for(job.kind)
        # Never before the enqueue it runs from (stamped by another host's
        # estimate of the database's clock: jobs.clock, to half a round trip).
        started = max(now, job.enqueued_at) if job.enqueued_at is not None else now
        job.status = JobStatus.RUNNING
        job.attempts_made = number
        job.started_at = job.started_at or started
        job.lease_expires_at = now + timedelta(
            seconds=policy.hard_time_limit + settings.JOBS_LEASE_GRACE
        )
        # An earlier attempt's progress is not this one's (jobs.progress).
        job.progress_done = job.progress_total = job.progress_at = None
        job.progress_message = ""
        job.save(
            update_fields=[
                "status",
                "attempts_made",
                "started_at",
                "lease_expires_at",
                "progress_done",
                "progress_total",
                "progress_message",
                "progress_at",
                *waiting.apply(job, None),
            ]
        )
        row = Attempt.objects.create(
            job=job,
            number=number,
            worker_hostname=hostname,
            worker_pid=pid,
            started_at=started,
            rss_before_bytes=rss_bytes,
        )
        transaction.on_commit(lambda: events.attempt_started.send(sender=Job, job=job, attempt=row))
        if number == 1:
            # The retry budget's denominator: one pipelined write, never raises.
            transaction.on_commit(lambda: budget.record_first(job.kind, now=now.timestamp()))
    _log_started(job, number)
    return _started(job, number, policy)


def _held_by_retry_budget(job: Job, number: int, *, now: datetime) -> bool:
    """Whether retry attempt `number` may not start now by the kind's retry budget (row locked).

    The retry decision counted the retry in the budget window of its due
    time (the previous attempt's end + its retry delay); one that waited in
    the queue into a later window is counted again where it starts
    (jobs.budget.admit). Over budget there, the job goes back to `retrying`
    until the budget's next free slot, or is dead with reason `budget`, and
    True is returned (the delivery is dropped unrun). Retries no decision
    counted (a lost worker's requeue, a requeue from the dead-letter set)
    are not judged here.
    """
    previous = job.attempts.filter(number=number - 1).only("finished_at", "retry_delay_seconds")
    row = previous.first()
    if row is None or row.finished_at is None or row.retry_delay_seconds is None:
        return False
    due = row.finished_at.timestamp() + row.retry_delay_seconds
    slot = budget.admit(job.kind, due=due, now=now.timestamp())
    if slot is None or slot.fallback or (slot.granted and not slot.deferred):
        return False
    if slot.first_exhaustion:
        log_budget_exhausted(job.kind)
    if slot.granted:
        job.status = JobStatus.RETRYING
        job.next_attempt_at = datetime.fromtimestamp(slot.due, tz=UTC)
        held = waiting.held_by_budget(kind=job.kind, held=slot.due - now.timestamp())
        job.save(update_fields=["status", "next_attempt_at", *waiting.apply(job, held)])
        # The retry now waits until the slot it was counted in: its start
        # there must be judged against that slot, not the due time it was
        # first given (else it is counted again at each start, each time
        # with a fresh maximum deferral, and held for ever).
        previous.update(retry_delay_seconds=slot.due - row.finished_at.timestamp())
        logger.info(
            "retry held by the retry budget job_id=%s kind=%s attempt=%s next_attempt_at=%s",
            job.id,
            job.kind,
            number,
            job.next_attempt_at.isoformat(),
        )
    else:
        job.status, job.dead_reason, job.finished_at = JobStatus.DEAD, DeadReason.BUDGET, now
        job.save(update_fields=["status", "dead_reason", "finished_at", *waiting.apply(job, None)])
        job_completed(job)
        logger.warning(
            "job dead job_id=%s kind=%s attempt=%s reason=budget: its retry started in a "
            "budget window with no room and found no slot within the maximum deferral",
            job.id,
            job.kind,
            number,
        )
    return True


def _log_started(job: Job, number: int) -> None:
    if logger.isEnabledFor(logging.INFO):
        logger.info(
            "attempt started job_id=%s kind=%s attempt=%s trace_id=%s",
            job.id,
            job.kind,
            number,
            tracing.trace_id_from(job.trace_parent),
        )


def _started(job: Job, number: int, policy: Policy | None = None) -> StartedAttempt:
    return StartedAttempt(
        job_id=job.id,
        kind=job.kind,
        payload=job.payload,
        attempt=number,
        max_attempts=job.max_attempts,
        policy=policy or policy_for(job.kind),
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
