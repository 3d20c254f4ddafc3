"""Selectors: the reads. Services write; these only query."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db.models import Count, Min, QuerySet
from django.utils import timezone

from jobs import broker
from jobs.models import Attempt, Job, JobStatus

logger = logging.getLogger(__name__)


def job_get(*, job_id: uuid.UUID | str) -> Job | None:
    """The job with its attempts prefetched, or None (also for an id that is not a UUID)."""
    try:
        job_id = uuid.UUID(str(job_id))
    except ValueError:
        return None
    return Job.objects.prefetch_related("attempts").filter(id=job_id).first()


def job_list(*, status: str | None = None, kind: str | None = None) -> QuerySet[Job]:
    """Jobs newest first, optionally filtered by status and kind."""
    qs = Job.objects.all()
    if status:
        qs = qs.filter(status=status)
    if kind:
        qs = qs.filter(kind=kind)
    return qs.order_by("-created_at")


def attempt_retry_delay(*, job_id: uuid.UUID | str, attempt: int) -> float | None:
    """Seconds until the retry that attempt `attempt` led to, or None if it led to none."""
    return (
        Attempt.objects.filter(job_id=job_id, number=attempt)
        .values_list("retry_delay_seconds", flat=True)
        .first()
    )


def jobs_due_for_retry(*, now: datetime, limit: int) -> QuerySet[Job]:
    """Retrying jobs whose next attempt is due, earliest first."""
    return Job.objects.filter(status=JobStatus.RETRYING, next_attempt_at__lte=now).order_by(
        "next_attempt_at"
    )[:limit]


def jobs_unpublished(*, enqueued_before: datetime, limit: int) -> QuerySet[Job]:
    """Queued jobs whose message never reached the broker (the outbox)."""
    return Job.objects.filter(
        status=JobStatus.QUEUED, published_at__isnull=True, enqueued_at__lte=enqueued_before
    ).order_by("enqueued_at")[:limit]


def jobs_published_before(*, published_before: datetime, limit: int) -> QuerySet[Job]:
    """Queued jobs whose message was published before `published_before` (oldest first)."""
    return Job.objects.filter(status=JobStatus.QUEUED, published_at__lt=published_before).order_by(
        "published_at"
    )[:limit]


def jobs_lease_expired(*, now: datetime, limit: int) -> QuerySet[Job]:
    """Running jobs whose attempt can no longer be alive (past hard limit + grace)."""
    return Job.objects.filter(status=JobStatus.RUNNING, lease_expires_at__lt=now).order_by(
        "lease_expires_at"
    )[:limit]


def queue_max_ready(*, queue: str) -> int:
    """The most ready jobs `queue` may hold before submissions get 503."""
    return settings.JOBS_QUEUE_MAX_READY_OVERRIDES.get(queue, settings.JOBS_QUEUE_MAX_READY)


def queue_ready_count(*, queue: str) -> int:
    """Jobs waiting to be picked up on `queue`: ready broker messages (every
    priority sub-queue) plus queued rows not yet published (the outbox).

    When the broker is unreachable only the outbox is counted.
    """
    outbox = Job.objects.filter(
        queue=queue, status=JobStatus.QUEUED, published_at__isnull=True
    ).count()
    try:
        ready = broker.ready_counts([queue])[queue]
    except Exception as exc:  # the broker or its client failing must not fail a submission
        logger.warning(
            "broker unreadable while counting queue %s: %s: %s", queue, type(exc).__name__, exc
        )
        ready = 0
    return ready + outbox


@dataclass(frozen=True)
class QueueDepth:
    """Jobs of one queue by part. Counts are jobs; `oldest_age_seconds` is 0 when none is queued."""

    ready: int
    reserved: int
    scheduled: int
    unpublished: int
    oldest_age_seconds: float


def queue_depths(*, queues: list[str] | None = None) -> dict[str, QueueDepth]:
    """Depth of each queue: broker parts from Redis (one round trip), the rest from the database.

    When the broker is unreachable its parts read 0 and a warning is logged.
    """
    queues = list(queues or settings.JOBS_QUEUES)
    try:
        ready, reserved = broker.depth_counts(queues)
    except Exception as exc:  # a scrape reports what it can
        logger.warning("broker unreadable while measuring queues: %s: %s", type(exc).__name__, exc)
        ready, reserved = dict.fromkeys(queues, 0), dict.fromkeys(queues, 0)
    scheduled = dict(
        Job.objects.filter(status=JobStatus.RETRYING, queue__in=queues)
        .values_list("queue")
        .annotate(n=Count("id"))
    )
    unpublished = dict(
        Job.objects.filter(status=JobStatus.QUEUED, published_at__isnull=True, queue__in=queues)
        .values_list("queue")
        .annotate(n=Count("id"))
    )
    oldest = dict(
        Job.objects.filter(status=JobStatus.QUEUED, queue__in=queues)
        .values_list("queue")
        .annotate(m=Min("enqueued_at"))
    )
    now = timezone.now()
    return {
        q: QueueDepth(
            ready=ready.get(q, 0),
            reserved=reserved.get(q, 0),
            scheduled=scheduled.get(q, 0),
            unpublished=unpublished.get(q, 0),
            oldest_age_seconds=max(0.0, (now - oldest[q]).total_seconds())
            if oldest.get(q)
            else 0.0,
        )
        for q in queues
    }


def dead_letter_counts() -> dict[tuple[str, str], int]:
    """{(kind, dead_reason): jobs} over the dead-letter set."""
    rows = (
        Job.objects.filter(status=JobStatus.DEAD)
        .values_list("kind", "dead_reason")
        .annotate(n=Count("id"))
    )
    return {(kind, reason): n for kind, reason, n in rows}


def pending_retry_count() -> int:
    """Jobs waiting in the scheduler's store for their next attempt (status retrying).

    One indexed COUNT (jobs_job_status_next_idx); cheap enough for `celery inspect stats`.
    """
    return Job.objects.filter(status=JobStatus.RETRYING).count()
