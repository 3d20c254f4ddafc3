"""Selectors: the reads. Services write; these only query."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime

import redis
from django.conf import settings
from django.db.models import QuerySet

from jobs import broker
from jobs.models import Job, JobStatus

logger = logging.getLogger(__name__)


def job_get(*, job_id: uuid.UUID | str) -> Job | None:
    """The job with its attempts prefetched, or None."""
    return Job.objects.prefetch_related("attempts").filter(id=job_id).first()


def job_list(*, status: str | None = None, kind: str | None = None) -> QuerySet[Job]:
    """Jobs newest first, optionally filtered by status and kind."""
    qs = Job.objects.all()
    if status:
        qs = qs.filter(status=status)
    if kind:
        qs = qs.filter(kind=kind)
    return qs.order_by("-created_at")


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
    except redis.RedisError as exc:
        logger.warning("broker unreachable while counting queue %s: %s", queue, exc)
        ready = 0
    return ready + outbox
