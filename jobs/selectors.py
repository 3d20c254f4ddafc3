"""Selectors: the reads. Services write; these only query."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import reduce
from operator import or_
from typing import Any

from django.conf import settings
from django.db.models import Count, Min, Q, QuerySet

from jobs import broker, brokers, clock, ownership
from jobs.clock import database_now  # noqa: F401 - re-exported: selectors.database_now()
from jobs.models import Attempt, Job, JobStatus
from jobs.services.publish_stamps import stamp_grace_seconds
from jobs.waiting import HELD_REASONS

logger = logging.getLogger(__name__)


def job_get(*, job_id: uuid.UUID | str) -> Job | None:
    """The job with its attempts prefetched, or None (also for an id that is not a UUID)."""
    try:
        job_id = uuid.UUID(str(job_id))
    except ValueError:
        return None
    return Job.objects.prefetch_related("attempts").filter(id=job_id).first()


def job_get_for(*, user: Any, job_id: uuid.UUID | str) -> Job | None:
    """job_get, for `user`: None also when the job is not theirs to see (jobs.ownership)."""
    try:
        job_id = uuid.UUID(str(job_id))
    except ValueError:
        return None
    jobs = ownership.visible_jobs(Job.objects.filter(id=job_id), user=user)
    return jobs.prefetch_related("attempts").first()


def job_list(
    *,
    user: Any,
    status: str | None = None,
    kind: str | None = None,
    queue: str | None = None,
    ordering: str = "-created_at",
) -> QuerySet[Job]:
    """The jobs `user` may see (jobs.ownership), filtered by status, kind and queue, in
    `ordering` (a Job field, "-" for descending).

    Ties are broken by id, so pages never overlap. Each filter has an index
    that keeps the created_at order (jobs.models.Job.Meta.indexes); a user
    who sees only their own jobs walks jobs_job_owner_created_idx.
    """
    qs = ownership.visible_jobs(Job.objects.all(), user=user)
    if status:
        qs = qs.filter(status=status)
    if kind:
        qs = qs.filter(kind=kind)
    if queue:
        qs = qs.filter(queue=queue)
    tie = "-id" if ordering.startswith("-") else "id"
    return qs.order_by(ordering, tie)


def job_creator(*, job_id: uuid.UUID | str) -> Any:
    """The user who submitted the job (None when unknown, deleted or the job is gone)."""
    job = Job.objects.select_related("created_by").filter(id=job_id).only("created_by").first()
    return job.created_by if job is not None else None


def job_attempts(*, job_id: uuid.UUID | str, limit: int) -> list[Attempt]:
    """The job's last `limit` attempts, oldest first, in one query (tracebacks included)."""
    rows = list(Attempt.objects.filter(job_id=job_id).order_by("-number")[:limit])
    rows.reverse()
    return rows


def attempt_retry_delay(*, job_id: uuid.UUID | str, attempt: int) -> float | None:
    """Seconds until the retry that attempt `attempt` led to, or None if it led to none."""
    return (
        Attempt.objects.filter(job_id=job_id, number=attempt)
        .values_list("retry_delay_seconds", flat=True)
        .first()
    )


def jobs_due_for_retry(*, now: datetime, limit: int) -> QuerySet[Job]:
    """Retrying and delayed jobs whose next attempt is due, earliest first."""
    return Job.objects.filter(
        status__in=(JobStatus.RETRYING, JobStatus.DELAYED), next_attempt_at__lte=now
    ).order_by("next_attempt_at")[:limit]


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


@dataclass(frozen=True)
class SubQueueHorizon:
    """Queued jobs of `queue` whose priority is one of `priorities` (None: no priority),
    published before `before`, should no longer be waiting in that sub-queue."""

    queue: str
    priorities: tuple[int | None, ...]
    before: datetime


def jobs_published_before_horizons(*, horizons: list[SubQueueHorizon], limit: int) -> QuerySet[Job]:
    """Queued jobs published before the horizon of their queue and priority, oldest first.

    One query; each horizon is a range of the partial index
    jobs_job_queued_published_idx (queue, priority, published_at WHERE
    queued), so its cost follows the rows returned, not the backlog.
    Rows with `published_at` NULL (the outbox) never match.
    """
    branches = []
    for horizon in horizons:
        values = [p for p in horizon.priorities if p is not None]
        by_priority = Q(priority__in=values)
        if None in horizon.priorities:
            by_priority |= Q(priority__isnull=True)
        branches.append(Q(queue=horizon.queue, published_at__lt=horizon.before) & by_priority)
    if not branches:
        return Job.objects.none()
    return Job.objects.filter(reduce(or_, branches), status=JobStatus.QUEUED).order_by(
        "published_at", "id"
    )[:limit]


def jobs_lease_expired(*, now: datetime, limit: int) -> QuerySet[Job]:
    """Running jobs whose attempt can no longer be alive (past hard limit + grace)."""
    return Job.objects.filter(status=JobStatus.RUNNING, lease_expires_at__lt=now).order_by(
        "lease_expires_at"
    )[:limit]


def queue_max_ready(*, queue: str) -> int:
    """The most ready jobs `queue` may hold before submissions get 503."""
    return settings.JOBS_QUEUE_MAX_READY_OVERRIDES.get(queue, settings.JOBS_QUEUE_MAX_READY)


class BackpressureCache:
    """This process's reuse of the backpressure's counts (see queue_ready_count). Thread-safe.

    `outbox_counts`: (queue, broker reachable) -> (monotonic time read,
    outbox count); `ready_readings`: queue -> [monotonic time read, ready
    messages read, submissions admitted on that reading]. One per process
    (`backpressure` below); tests pass their own.
    """

    def __init__(self) -> None:
        self.outbox_counts: dict[tuple[str, bool], tuple[float, int]] = {}
        self.ready_readings: dict[str, list[float]] = {}
        self.lock = threading.Lock()

    def forget(self, queue: str | None = None) -> None:
        """Drop the outbox count and broker reading of `queue` (all when None)."""
        with self.lock:
            if queue is None:
                self.outbox_counts.clear()
                self.ready_readings.clear()
                return
            self.outbox_counts.pop((queue, True), None)
            self.outbox_counts.pop((queue, False), None)
            # Nor may a reading of the broker taken before the failure stand in for
            # the probe that tells when it is back.
            self.ready_readings.pop(queue, None)

    def outbox_count(self, queue: str, *, broker_reachable: bool = True) -> int:
        """Queued rows of `queue` not yet published, reused for JOBS_BACKPRESSURE_OUTBOX_CACHE_SECONDS."""
        max_age = settings.JOBS_BACKPRESSURE_OUTBOX_CACHE_SECONDS
        now = time.monotonic()
        cached = self.outbox_counts.get((queue, broker_reachable))
        if cached is not None and now - cached[0] < max_age:
            return cached[1]
        unpublished = Job.objects.filter(
            queue=queue, status=JobStatus.QUEUED, published_at__isnull=True
        ).exclude(  # held by a pause, a concurrency or rate limit or a fuse: not in the way
            waiting_reason__in=HELD_REASONS
        )
        grace = stamp_grace_seconds()
        if broker_reachable and grace > 0:
            # Younger rows were published and wait for their batched stamp: the
            # broker's count has them already (jobs.services.publish_stamps).
            unpublished = unpublished.filter(
                enqueued_at__lte=clock.now() - timedelta(seconds=grace)
            )
        count = unpublished.count()
        if max_age > 0:
            self.outbox_counts[(queue, broker_reachable)] = (now, count)
        return count

    def broker_ready(self, queue: str, limit: int | None) -> tuple[int, bool]:
        """(ready messages of `queue`, whether the broker was read): read, or estimated while
        far below `limit`.

        Raises redis.RedisError when the broker must be read and cannot be.
        """
        max_age = settings.JOBS_BACKPRESSURE_READY_CACHE_SECONDS
        reuse = limit is not None and max_age > 0
        now = time.monotonic()
        if limit is not None and reuse:
            with self.lock:
                reading = self.ready_readings.get(queue)
                if reading is not None and now - reading[0] < max_age:
                    # The last reading plus every submission admitted on it since
                    # (as if none had been consumed): an overestimate, read again
                    # once it reaches half the limit.
                    estimate = int(reading[1] + reading[2])
                    if 2 * estimate < limit:
                        reading[2] += 1
                        return estimate, False
        ready = brokers.current().ready_counts([queue])[queue]
        if reuse:
            with self.lock:
                self.ready_readings[queue] = [now, ready, 1]
        return ready, True


backpressure = BackpressureCache()


def forget_outbox_count(queue: str | None = None) -> None:
    """Drop this process's cached outbox count and broker reading of `queue` (all when None).

    Called when a publish or a broker read failed here: the outbox grows
    while the broker is away.
    """
    backpressure.forget(queue)


def _outbox_count(queue: str, *, broker_reachable: bool = True) -> int:
    return backpressure.outbox_count(queue, broker_reachable=broker_reachable)


def queue_ready_count(
    *, queue: str, limit: int | None = None, cache: BackpressureCache | None = None
) -> int:
    """Jobs waiting to be picked up on `queue`: ready broker messages (every
    priority sub-queue) plus queued rows not yet published (the outbox).

    When the broker is unreachable only the outbox is counted (and, for
    JOBS_BROKER_BACKOFF_SECONDS after a failed read, it is not asked).
    Without `limit` the broker part is read on every call (one pipelined
    Redis round trip). With it (a submission asking "is the queue full?"),
    a reading is reused for JOBS_BACKPRESSURE_READY_CACHE_SECONDS (in
    `cache`, this process's `backpressure` unless given) while it, plus the submissions admitted on it since, is below
    half the limit; from half full on, every call reads the broker. One
    process alone therefore gets its 503 exactly at the limit. Staleness:
    what other processes (web processes, the scheduler's publishes) add
    within JOBS_BACKPRESSURE_READY_CACHE_SECONDS of a reading is not seen
    by it, so with W web processes that all read a nearly empty queue at
    the same moment the queue can reach W x limit / 2 before every one of
    them reads it again (with the default 0.5 s, only when that many
    submissions arrive within half a second). The outbox part, a database
    round trip, is near 0 while publishing works; it is reused for up to
    JOBS_BACKPRESSURE_OUTBOX_CACHE_SECONDS (seconds, per process; 0 reads it
    every time) and forgotten when a publish from this process fails. Its
    staleness: during a broker outage, rows other processes wrote to the
    outbox in the last JOBS_BACKPRESSURE_OUTBOX_CACHE_SECONDS are not
    counted yet, so a full queue can take that many more before answering 503.
    While the broker answers, rows younger than
    jobs.services.publish_stamps.stamp_grace_seconds() (1 s with batched
    stamps; 0 without) are left out of the outbox part: published, their
    stamp still on its way, they are in the broker's count already and
    would count twice. Rows this process could not publish are counted at
    once (a failed publish marks the broker unreachable here).
    """
    cache = cache or backpressure
    if broker.recently_unreachable():
        # As when the read fails, without waiting for it to fail again.
        return cache.outbox_count(queue, broker_reachable=False)
    try:
        ready, read = cache.broker_ready(queue, limit)
    except Exception as exc:  # the broker or its client failing must not fail a submission
        broker.mark_unreachable()
        cache.forget(queue)
        logger.warning(
            "broker unreadable while counting queue %s: %s: %s", queue, type(exc).__name__, exc
        )
        return cache.outbox_count(queue, broker_reachable=False)
    if read:
        broker.mark_reachable()
    return ready + cache.outbox_count(queue)


@dataclass(frozen=True)
class QueueDepth:
    """Jobs of one queue by part. Counts are jobs; `oldest_age_seconds` is 0 when none is queued.

    `broker_read` is False when the broker could not be read: `ready` and
    `reserved` then read 0 without being known.
    """

    ready: int
    reserved: int
    scheduled: int
    unpublished: int
    # Jobs waiting for their `run_after` (status delayed).
    delayed: int
    oldest_age_seconds: float
    broker_read: bool = True


def queue_depths(*, queues: list[str] | None = None) -> dict[str, QueueDepth]:
    """Depth of each queue: broker parts from Redis (one round trip), the rest from the database.

    When the broker is unreachable its parts read 0, `broker_read` is False
    and a warning is logged.
    """
    queues = list(queues or settings.JOBS_QUEUES)
    broker_read = True
    adapter = brokers.current()
    try:
        ready, reserved = adapter.depth_counts(queues)
        if not adapter.knows_reserved:  # RabbitMQ: unacked is not readable over AMQP
            reserved = dict.fromkeys(queues, 0) | dict(
                Job.objects.filter(status=JobStatus.RUNNING, queue__in=queues)
                .values_list("queue")
                .annotate(n=Count("id"))
            )
    except Exception as exc:  # a scrape reports what it can
        logger.warning("broker unreadable while measuring queues: %s: %s", type(exc).__name__, exc)
        ready, reserved = dict.fromkeys(queues, 0), dict.fromkeys(queues, 0)
        broker_read = False
    scheduled = dict(
        Job.objects.filter(status=JobStatus.RETRYING, queue__in=queues)
        .values_list("queue")
        .annotate(n=Count("id"))
    )
    delayed = dict(
        Job.objects.filter(status=JobStatus.DELAYED, queue__in=queues)
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
    now = database_now()
    return {
        q: QueueDepth(
            ready=ready.get(q, 0),
            reserved=reserved.get(q, 0),
            scheduled=scheduled.get(q, 0),
            unpublished=unpublished.get(q, 0),
            delayed=delayed.get(q, 0),
            oldest_age_seconds=max(0.0, (now - oldest[q]).total_seconds())
            if oldest.get(q)
            else 0.0,
            broker_read=broker_read,
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
