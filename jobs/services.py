"""Services: the only writers of job state.

Submit, publish, start and finish attempts, promote retries, sweep the
outbox and expired leases, cancel and requeue. Every state change follows
DESIGN.md ("Job lifecycle", "Retries") and happens inside a transaction that
locks the job row, so concurrent workers, the scheduler and the API never
interleave on one job.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psutil
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, Q
from django.utils import timezone
from rest_framework.exceptions import ValidationError

from jobs import events, selectors
from jobs.errors import IdempotencyConflict, InvalidSubmission, InvalidTransition, QueueFull
from jobs.kinds import UnknownKind, get_kind, policy_for
from jobs.models import Attempt, AttemptOutcome, DeadReason, Job, JobStatus
from jobs.policy import Policy
from observability import tracing

logger = logging.getLogger(__name__)

# An attempt that ended with one of these may be retried (policy permitting).
RETRYABLE_OUTCOMES = frozenset(
    {
        AttemptOutcome.ERROR,
        AttemptOutcome.SOFT_TIMEOUT,
        AttemptOutcome.HARD_TIMEOUT,
        AttemptOutcome.WORKER_LOST,
    }
)


@dataclass(frozen=True)
class SubmitResult:
    """`created` is False when an idempotent resubmission returned the existing job."""

    job: Job
    created: bool


@dataclass(frozen=True)
class StartedAttempt:
    """What the runner needs to execute one attempt."""

    job_id: uuid.UUID
    kind: str
    payload: dict[str, Any]
    attempt: int
    max_attempts: int
    policy: Policy
    queue: str = "default"
    trace_parent: str = ""


@dataclass(frozen=True)
class AttemptReport:
    """How an attempt ended, as the runner saw it.

    `retryable` is whether the failure may be retried; `retry_after` is the
    least delay (seconds) the failure asked for.
    """

    outcome: AttemptOutcome
    result: Any = None
    error_type: str = ""
    error_message: str = ""
    traceback: str = ""
    retryable: bool = True
    retry_after: float | None = None
    trace_id: str = ""


def _canonical(value: Any) -> Any:
    # 1 and 1.0 are the same request: a default of 0 and an explicit 0.0 must match.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    return value


def request_fingerprint(*, kind: str, queue: str, payload: Any) -> str:
    """SHA-256 hex of the canonical JSON of (kind, queue, payload); integral floats count as ints."""
    canonical = json.dumps(
        {"kind": kind, "queue": queue, "payload": _canonical(payload)},
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def _flatten_errors(detail: Any, prefix: str) -> dict[str, list[str]]:
    if isinstance(detail, dict):
        out: dict[str, list[str]] = {}
        for key, value in detail.items():
            name = prefix if key == "non_field_errors" else f"{prefix}.{key}"
            for k, v in _flatten_errors(value, name).items():
                out.setdefault(k, []).extend(v)
        return out
    if isinstance(detail, list) and detail and all(isinstance(d, str) for d in detail):
        return {prefix: [str(d) for d in detail]}
    if isinstance(detail, list):
        out = {}
        for i, item in enumerate(detail):
            for k, v in _flatten_errors(item, f"{prefix}.{i}").items():
                out.setdefault(k, []).extend(v)
        return out
    return {prefix: [str(detail)]}


def job_submit(
    *,
    kind: str,
    payload: Any,
    queue: str | None = None,
    idempotency_key: str | None = None,
    user: Any = None,
) -> SubmitResult:
    """Validate and durably record a job, then publish it when the transaction commits.

    Returns SubmitResult(job, created). Raises InvalidSubmission (unknown
    kind, bad payload or queue), IdempotencyConflict (key reused with another
    request) or QueueFull (backpressure). Nothing is written when it raises.
    """
    try:
        job_kind = get_kind(kind)
    except UnknownKind as exc:
        raise InvalidSubmission({"kind": [str(exc)]}) from None
    try:
        validated = job_kind.validate_payload(payload)
    except ValidationError as exc:
        raise InvalidSubmission(_flatten_errors(exc.detail, "payload")) from None
    queue = queue or job_kind.queue
    if queue not in settings.JOBS_QUEUES:
        raise InvalidSubmission(
            {"queue": [f"unknown queue {queue!r}; known: {', '.join(settings.JOBS_QUEUES)}"]}
        )
    fingerprint = request_fingerprint(kind=kind, queue=queue, payload=validated)

    if idempotency_key:
        existing = Job.objects.filter(kind=kind, idempotency_key=idempotency_key).first()
        if existing is not None:
            return _idempotent_match(existing, fingerprint)

    limit = selectors.queue_max_ready(queue=queue)
    if selectors.queue_ready_count(queue=queue) >= limit:
        raise QueueFull(
            f"queue {queue!r} holds its maximum of {limit} ready jobs",
            retry_after=settings.JOBS_BACKPRESSURE_RETRY_AFTER,
        )

    policy = policy_for(kind)
    now = timezone.now()
    try:
        with transaction.atomic():
            job = Job.objects.create(
                kind=kind,
                queue=queue,
                payload=validated,
                status=JobStatus.QUEUED,
                max_attempts=policy.max_attempts,
                idempotency_key=idempotency_key or None,
                request_fingerprint=fingerprint,
                enqueued_at=now,
                created_by=user if getattr(user, "is_authenticated", False) else None,
                trace_parent=tracing.current_traceparent(),
            )
            transaction.on_commit(lambda: job_publish(job_id=job.id))
            transaction.on_commit(lambda: events.job_submitted.send(sender=Job, job=job))
    except IntegrityError:
        # Lost a race with a concurrent submission of the same key.
        existing = Job.objects.filter(kind=kind, idempotency_key=idempotency_key).first()
        if idempotency_key and existing is not None:
            return _idempotent_match(existing, fingerprint)
        raise
    logger.info("job submitted job_id=%s kind=%s queue=%s", job.id, kind, queue)
    return SubmitResult(job=job, created=True)


def _idempotent_match(existing: Job, fingerprint: str) -> SubmitResult:
    if existing.request_fingerprint != fingerprint:
        raise IdempotencyConflict(
            f"idempotency key already used for job {existing.id} with a different request"
        )
    return SubmitResult(job=existing, created=False)


def job_publish(*, job_id: uuid.UUID) -> bool:
    """Publish the message that starts the job's next attempt; record `published_at`.

    Returns False (and logs) when the job is not waiting for a publish or the
    broker refused; the outbox sweep tries again later. Never raises for a
    broker outage.
    """
    from jobs.tasks import run_attempt_task

    job = (
        Job.objects.filter(id=job_id, status=JobStatus.QUEUED)
        .only("kind", "queue", "attempts_made", "trace_parent")
        .first()
    )
    if job is None:
        return False
    attempt = job.attempts_made + 1
    policy = policy_for(job.kind)
    try:
        # In the submitting request's trace, whoever publishes (API or scheduler).
        with tracing.in_trace(job.trace_parent):
            run_attempt_task.apply_async(
                args=[str(job.id), attempt],
                queue=job.queue,
                task_id=f"{job.id}:{attempt}",
                soft_time_limit=policy.soft_time_limit,
                time_limit=policy.hard_time_limit,
                retry=False,
            )
    except Exception as exc:  # kombu/redis raise many types for one outage
        logger.warning(
            "publish failed job_id=%s attempt=%s: %s: %s", job.id, attempt, type(exc).__name__, exc
        )
        return False
    # Only stamp the attempt we published: a later attempt waiting for its own
    # publish must keep published_at NULL so the sweep still sees it.
    Job.objects.filter(id=job.id, published_at__isnull=True).filter(
        Q(status=JobStatus.QUEUED, attempts_made=attempt - 1)
        | (Q(attempts_made=attempt) & ~Q(status=JobStatus.QUEUED))
    ).update(published_at=timezone.now())
    return True


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
    logger.info("attempt started job_id=%s kind=%s attempt=%s", job.id, job.kind, number)
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
        "attempt lost job_id=%s kind=%s attempt=%s losses=%s status=%s: %s",
        job.id,
        job.kind,
        row.number,
        job.worker_losses,
        job.status,
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
            job.result = report.result
            job.finished_at = now
            job.lease_expires_at = None
            job.save(update_fields=["status", "result", "finished_at", "lease_expires_at"])
            _completed(job)
        else:
            _record_failure(job, row, report, now=now)
    logger.info(
        "attempt finished job_id=%s kind=%s attempt=%s outcome=%s status=%s",
        job.id,
        job.kind,
        attempt,
        report.outcome,
        job.status,
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
    row.error_type = report.error_type[:255]
    row.error_message = report.error_message[:10_000]
    row.traceback = report.traceback[-20_000:]
    row.save()


def _completed(job: Job) -> None:
    transaction.on_commit(lambda: events.job_completed.send(sender=Job, job=job))


def _record_failure(job: Job, row: Attempt, report: AttemptReport, *, now: datetime) -> None:
    """Close a failed attempt and send the job to `retrying` or `dead` by its policy."""
    policy = policy_for(job.kind)
    job.last_error = f"{report.error_type}: {report.error_message}"[:10_000]
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


def retries_promote_due(*, now: datetime | None = None, limit: int = 500) -> int:
    """Move due `retrying` jobs back to `queued` and publish them on commit.

    Returns how many were promoted. Safe to run in several schedulers at once.
    """
    now = now or timezone.now()
    with transaction.atomic():
        ids = list(
            selectors.jobs_due_for_retry(now=now, limit=limit)
            .select_for_update(skip_locked=True)
            .values_list("id", flat=True)
        )
        if not ids:
            return 0
        Job.objects.filter(id__in=ids, status=JobStatus.RETRYING).update(
            status=JobStatus.QUEUED, next_attempt_at=None, enqueued_at=now, published_at=None
        )
        transaction.on_commit(lambda: [job_publish(job_id=i) for i in ids])
    return len(ids)


def outbox_sweep(*, now: datetime | None = None, limit: int = 500) -> int:
    """Republish queued jobs left unpublished past JOBS_SWEEP_UNPUBLISHED_AFTER seconds.

    Returns how many were published.
    """
    now = now or timezone.now()
    before = now - timedelta(seconds=settings.JOBS_SWEEP_UNPUBLISHED_AFTER)
    ids = list(
        selectors.jobs_unpublished(enqueued_before=before, limit=limit).values_list("id", flat=True)
    )
    published = 0
    for job_id in ids:
        if not job_publish(job_id=job_id):
            break  # the broker is down: try the rest on the next pass
        published += 1
    if ids:
        logger.info("outbox sweep published %s of %s unpublished jobs", published, len(ids))
    return published


def outbox_reopen(*, published_before: datetime, limit: int = 500) -> int:
    """Mark queued jobs published before `published_before` as unpublished, for the sweep to republish.

    For messages the broker lost (restart without persistence, flush,
    eviction). A message that was not lost after all is delivered twice;
    attempt_start drops the second copy. Returns how many rows were reopened.
    """
    ids = list(
        selectors.jobs_published_before(published_before=published_before, limit=limit).values_list(
            "id", flat=True
        )
    )
    if not ids:
        return 0
    reopened = Job.objects.filter(
        id__in=ids, status=JobStatus.QUEUED, published_at__lt=published_before
    ).update(published_at=None)
    logger.warning(
        "outbox reopened for %s queued jobs published before %s",
        reopened,
        published_before.isoformat(),
    )
    return reopened


def leases_expire(*, now: datetime | None = None, limit: int = 500) -> int:
    """Close running attempts past their lease as `worker_lost` and queue the job again.

    A lease outlives the hard time limit, so such an attempt cannot still be
    running; its worker died without any process able to record it (e.g.
    the whole worker was killed). Returns how many attempts were closed.
    """
    now = now or timezone.now()
    closed = 0
    for job_id in list(
        selectors.jobs_lease_expired(now=now, limit=limit).values_list("id", flat=True)
    ):
        with transaction.atomic():
            job = (
                Job.objects.select_for_update()
                .filter(id=job_id, status=JobStatus.RUNNING, lease_expires_at__lt=now)
                .first()
            )
            if job is None:
                continue
            row = job.attempts.filter(number=job.attempts_made).first()
            if row is None or row.finished_at is not None:
                continue
            _record_worker_lost(
                job,
                row,
                now=now,
                requeued=False,
                message="lease expired: no worker finished this attempt",
            )
            if job.status == JobStatus.QUEUED:
                transaction.on_commit(lambda j=job.id: job_publish(job_id=j))
            closed += 1
    return closed


def job_cancel(*, job_id: uuid.UUID | str) -> Job:
    """Cancel a non-terminal job.

    A queued or retrying job never starts. A running attempt gets its
    cancellation flag (through Redis, see jobs.supervisor) and is aborted
    JOBS_ABORT_GRACE seconds later if it ignores it. Raises Job.DoesNotExist,
    or InvalidTransition when the job is terminal.
    """
    with transaction.atomic():
        job = Job.objects.select_for_update().get(id=job_id)
        if job.is_terminal:
            raise InvalidTransition(
                f"job is {job.status}; only queued, retrying or running jobs can be cancelled"
            )
        was_running = job.status == JobStatus.RUNNING
        job.status = JobStatus.CANCELLED
        job.finished_at = timezone.now()
        job.next_attempt_at = None
        job.lease_expires_at = None
        job.save(update_fields=["status", "finished_at", "next_attempt_at", "lease_expires_at"])
        _completed(job)
        if was_running:
            transaction.on_commit(lambda: _signal_cancel(job.id))
    logger.info("job cancelled job_id=%s kind=%s was_running=%s", job.id, job.kind, was_running)
    return job


def _signal_cancel(job_id: uuid.UUID) -> None:
    from jobs.broker import broker_client
    from jobs.supervisor import cancel_key

    try:
        broker_client().set(cancel_key(job_id), "1", ex=settings.JOBS_CANCEL_TTL)
    except Exception as exc:  # the job is cancelled either way; the attempt runs to its limit
        logger.warning("could not signal cancellation job_id=%s: %s", job_id, exc)


def job_requeue(*, job_id: uuid.UUID | str) -> Job:
    """Give a dead job a fresh set of attempts and queue it again.

    Raises Job.DoesNotExist, or InvalidTransition unless the job is dead.
    """
    with transaction.atomic():
        job = Job.objects.select_for_update().get(id=job_id)
        if job.status != JobStatus.DEAD:
            raise InvalidTransition(f"job is {job.status}; only dead jobs can be requeued")
        job.status = JobStatus.QUEUED
        job.max_attempts = job.attempts_made + policy_for(job.kind).max_attempts
        job.worker_losses = 0  # a fresh set of attempts gets a fresh poison count
        job.dead_reason = ""
        job.finished_at = None
        job.enqueued_at = timezone.now()
        job.published_at = None
        job.save(
            update_fields=[
                "status",
                "max_attempts",
                "worker_losses",
                "dead_reason",
                "finished_at",
                "enqueued_at",
                "published_at",
            ]
        )
        transaction.on_commit(lambda: job_publish(job_id=job.id))
    logger.info("job requeued job_id=%s kind=%s", job.id, job.kind)
    return job
