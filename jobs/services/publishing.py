"""Publishing a queued job's next attempt (the transactional outbox's send), stamped twice
on the database's clock: a header before the publish, `published_at` after it
(jobs.services.lost_messages relies on that order)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from django.db.models import QuerySet
from django.db.models.functions import Now

from config.celery_app import app
from jobs import broker, selectors, task_names
from jobs.db import close_connections, is_unavailable
from jobs.kinds import UnknownKind, policy_for
from jobs.models import Job, JobStatus
from jobs.services.publish_stamps import defer_stamp, write_stamps
from observability import tracing

logger = logging.getLogger(__name__)


def job_publish(*, job_id: uuid.UUID) -> bool:
    """Publish the message that starts the job's next attempt; record `published_at`.

    Both stamps come from the database's clock (one clock for every
    publisher): the message carries the time read just before the publish
    (header broker.PUBLISHED_AT_HEADER) and `published_at` is the time just
    after it, so a job whose `published_at` is earlier than a message's
    header was pushed before that message (jobs.services.lost_messages).

    Returns False (and logs) when the job is not waiting for a publish or the
    broker refused; the outbox sweep tries again later. Never raises for a
    broker outage. Returns True when the message was published but the
    database connection was lost before `published_at` was written: the
    sweep publishes again and the second delivery is dropped at the
    attempt's start, so the caller must not report a failure.
    """
    job = _waiting_for_publish([job_id]).first()
    if job is None:
        return False
    return publish_one(job, stamped_at=_stamped_at(job))


def jobs_publish(*, job_ids: Sequence[uuid.UUID | str]) -> int:
    """job_publish for many jobs: one read, one publish each (in `job_ids` order), one stamp.

    The rows and the database's time are read in one query; the messages
    are published one by one with that time as their header; `published_at`
    is then written for all of them in one UPDATE (jobs.services.
    publish_stamps.write_stamps), so each is still stamped after its
    publish. Jobs no longer queued are skipped; so is a job whose message
    cannot be built (its kind unregistered or its limits invalid: logged
    with the traceback, the row left for an operator). Stops at the first
    publish the broker refuses: the rest stay unpublished for the outbox
    sweep. Whatever was published is stamped, even when something raises
    midway. Returns how many were published. Never raises for a broker
    outage or a database connection lost before the stamp (as job_publish).
    Used by the scheduler, which publishes due retries and the outbox in
    batches of up to 500: per job it was a read, a publish and a committed
    UPDATE.
    """
    if not job_ids:
        return 0
    ordered = [uuid.UUID(str(job_id)) for job_id in job_ids]
    rows = {job.id: job for job in _waiting_for_publish(ordered)}
    published: list[tuple[uuid.UUID, int]] = []
    try:
        for job_id in ordered:
            job = rows.get(job_id)
            if job is None:
                continue
            try:
                sent = _send(job, stamped_at=_stamped_at(job))
            except (UnknownKind, ValueError):
                logger.exception("publish skipped job_id=%s kind=%s", job.id, job.kind)
                continue
            if not sent:
                break
            published.append((job.id, job.attempts_made + 1))
    finally:
        # Unstamped, a published row would be published again by every sweep.
        _stamp(published)
    return len(published)


def _waiting_for_publish(job_ids: Sequence[uuid.UUID]) -> QuerySet[Job]:
    """The queued jobs among `job_ids`, with what a publish needs and `stamped_at` (the database's now)."""
    return (
        Job.objects.filter(id__in=job_ids, status=JobStatus.QUEUED)
        .only("kind", "queue", "priority", "attempts_made", "trace_parent")
        .annotate(stamped_at=Now())
    )


def _stamped_at(job: Job) -> datetime:
    """The database's time read with the row (_waiting_for_publish's annotation)."""
    stamped: datetime = job.__dict__["stamped_at"]
    return stamped


def publish_one(job: Job, *, stamped_at: datetime, deferred_stamp: bool = False) -> bool:
    """job_publish once the job (queued; kind, queue, priority, attempts_made,
    trace_parent loaded) and the database's time before the publish are known.

    `deferred_stamp`: `published_at` is written later by this process's
    stamp writer (jobs.services.publish_stamps) when batching is on, so the
    submitting request does not wait for it.
    """
    if not _send(job, stamped_at=stamped_at):
        return False
    attempt = job.attempts_made + 1
    if deferred_stamp and settings.JOBS_PUBLISH_STAMP_DELAY_SECONDS > 0:
        try:
            defer_stamp(job.id, attempt)
            return True
        except RuntimeError as exc:  # no writer thread could start: stamp it here
            logger.warning("stamping in the request job_id=%s: %s", job.id, exc)
    _stamp([(job.id, attempt)])
    return True


def _send(job: Job, *, stamped_at: datetime) -> bool:
    """Publish the message of the job's next attempt, headed with `stamped_at`.

    Returns False (logged, the outbox count forgotten) when the broker is
    known unreachable or refuses; never raises for a broker outage.
    """
    attempt = job.attempts_made + 1
    policy = policy_for(job.kind)
    if broker.recently_unreachable():
        # The broker just failed a call: leave the job to the outbox sweep
        # rather than wait for the socket timeout again.
        logger.info("publish deferred to the outbox sweep job_id=%s: broker unreachable", job.id)
        selectors.forget_outbox_count(job.queue)
        return False
    try:
        # In the submitting request's trace, whoever publishes (API or scheduler).
        with tracing.in_trace(job.trace_parent):
            # Celery's stubs type these narrower than Celery takes them (args a list, float
            # limits, no priority, kombu's confirm_timeout): passed as one mapping.
            options: dict[str, Any] = {
                "args": [str(job.id), attempt],
                "queue": job.queue,
                "priority": job.priority,
                "task_id": f"{job.id}:{attempt}",
                "soft_time_limit": policy.soft_time_limit,
                "time_limit": policy.hard_time_limit,
                "retry": False,
                # RabbitMQ (publisher confirms): no confirm in time is a failed publish.
                "confirm_timeout": settings.JOBS_BROKER_CONFIRM_TIMEOUT,
                "headers": {broker.PUBLISHED_AT_HEADER: stamped_at.isoformat()},
            }
            app.tasks[task_names.RUN_ATTEMPT].apply_async(**options)
    except Exception as exc:  # kombu/redis raise many types for one outage
        broker.mark_unreachable()
        logger.warning(
            "publish failed job_id=%s attempt=%s: %s: %s", job.id, attempt, type(exc).__name__, exc
        )
        selectors.forget_outbox_count(job.queue)
        return False
    broker.mark_reachable()
    return True


def _stamp(stamps: list[tuple[uuid.UUID, int]]) -> None:
    """Write `published_at` for (job id, attempt) pairs just published; a lost connection is logged."""
    if not stamps:
        return
    try:
        write_stamps(stamps)
    except DatabaseError as exc:
        if not is_unavailable(exc):
            raise
        # The job's row is committed and its message is on the broker: the
        # submission succeeded. Answering it with an error would make a client
        # without an idempotency key submit it again. Without the stamp the
        # outbox sweep publishes it once more, and the attempt's start drops
        # whichever delivery comes second (jobs.engine.Engine.start).
        close_connections()
        (job_id, attempt), others = stamps[0], len(stamps) - 1
        logger.warning(
            "published but not stamped job_id=%s attempt=%s%s (database connection lost: %s: %s);"
            " the outbox sweep will publish again and the duplicate is dropped",
            job_id,
            attempt,
            f" and {others} other jobs" if others else "",
            type(exc).__name__,
            str(exc).strip().splitlines()[0] if str(exc).strip() else "",
        )
