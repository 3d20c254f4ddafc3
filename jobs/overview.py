"""Selectors of the admin overview: each a bounded read (indexed, grouped or estimated).

Every function returns plain frozen dataclasses, so the page (and its
tests) never touch querysets. Query budget of the whole overview: status
counts 1-2, attempts chart 1, queue depth 3 (jobs.selectors.queue_depths),
dead letters 1, worker reports 1 (PostgreSQL state store), schedules 1; Redis: the queue
lengths pipeline (and the worker reports on the Redis state store).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Case, Count, IntegerField, Value, When
from django.db.models.functions import TruncMinute
from django.utils import timezone

from jobs import estimates, selectors, worker_reports
from jobs.models import TERMINAL_STATUSES, Attempt, Job, JobStatus, Schedule

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StatusCounts:
    """Jobs per status; `exact[status]` is False where the count is PostgreSQL's estimate."""

    counts: dict[str, int]
    exact: dict[str, bool]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def status_counts() -> StatusCounts:
    """Jobs per status.

    Queued, running and retrying are counted exactly (the active set is
    small and indexed by status). Terminal statuses grow forever: past
    JOBS_ADMIN_EXACT_COUNT_LIMIT rows in the table they come from the
    planner's statistics (jobs.estimates.status_estimates).
    """
    active = [s for s in JobStatus.values if s not in TERMINAL_STATUSES]
    counts = dict.fromkeys(JobStatus.values, 0)
    exact = dict.fromkeys(JobStatus.values, True)
    rows = Job.objects.filter(status__in=active).values_list("status").annotate(n=Count("id"))
    counts.update(dict(rows))
    stats = estimates.status_estimates(Job._meta.db_table, "status")
    if stats is not None and stats[0] >= settings.JOBS_ADMIN_EXACT_COUNT_LIMIT:
        for status in TERMINAL_STATUSES:
            counts[status] = stats[1].get(status, 0)
            exact[status] = False
    else:
        terminal = (
            Job.objects.filter(status__in=TERMINAL_STATUSES)
            .values_list("status")
            .annotate(n=Count("id"))
        )
        counts.update(dict(terminal))
    return StatusCounts(counts=counts, exact=exact)


@dataclass(frozen=True)
class KindAttempts:
    """Attempts of one kind started per bucket: first attempts and retries (number > 1)."""

    kind: str
    first: list[int]
    retries: list[int]

    @property
    def total_first(self) -> int:
        return sum(self.first)

    @property
    def total_retries(self) -> int:
        return sum(self.retries)


@dataclass(frozen=True)
class AttemptsWindow:
    """Attempts over the last `minutes`, in `bucket_minutes` buckets (oldest first), per kind."""

    since: datetime
    minutes: int
    bucket_minutes: int
    kinds: list[KindAttempts] = field(default_factory=list)


def attempts_last_hour(
    *, now: datetime | None = None, minutes: int = 60, bucket_minutes: int = 5, max_kinds: int = 8
) -> AttemptsWindow:
    """First attempts vs retries per kind over the last `minutes`, bucketed.

    One grouped query over the attempts started in the window
    (jobs_attempt_started_idx), at most minutes x kinds x 2 rows back. The
    `max_kinds` kinds with most attempts are kept, the busiest first.
    """
    now = now or timezone.now()
    since = now - timedelta(minutes=minutes)
    buckets = minutes // bucket_minutes
    rows = (
        Attempt.objects.filter(started_at__gte=since)
        .annotate(
            minute=TruncMinute("started_at"),
            retry=Case(
                When(number__gt=1, then=Value(1)), default=Value(0), output_field=IntegerField()
            ),
        )
        .values_list("job__kind", "minute", "retry")
        .annotate(n=Count("id"))
        .order_by()
    )
    per_kind: dict[str, KindAttempts] = {}
    for kind, minute, retry, n in rows:
        entry = per_kind.setdefault(kind, KindAttempts(kind, [0] * buckets, [0] * buckets))
        index = min(
            buckets - 1, max(0, int((minute - since).total_seconds() // (bucket_minutes * 60)))
        )
        (entry.retries if retry else entry.first)[index] += n
    ranked = sorted(per_kind.values(), key=lambda k: -(k.total_first + k.total_retries))
    return AttemptsWindow(
        since=since, minutes=minutes, bucket_minutes=bucket_minutes, kinds=ranked[:max_kinds]
    )


def queue_depths() -> dict[str, selectors.QueueDepth]:
    """Depth of every configured queue by part (jobs.selectors.queue_depths)."""
    return selectors.queue_depths()


@dataclass(frozen=True)
class ChildMemory:
    """One worker child: RSS, memory it owns (RSS grown since fork; None if unknown), threads."""

    hostname: str
    pid: int
    rss_bytes: int
    threads: int
    owned_bytes: int | None = None


@dataclass(frozen=True)
class WorkerMemory:
    """Children's RSS against each worker's limit, and recycles by reason, from worker reports.

    `error` says why nothing could be read (the state store down); `workers` counts reports.
    """

    children: list[ChildMemory]
    limits: dict[str, int]
    recycled: dict[str, int]
    workers: int
    error: str = ""


def worker_memory() -> WorkerMemory:
    """The live workers' own reports (jobs.worker_reports): one statement, or two Redis round trips."""

    max_age = 3 * max(settings.JOBS_WORKER_REPORT_INTERVAL, 1.0)
    try:
        reports = worker_reports.read(max_age=max_age)
    except Exception as exc:  # the page shows what it can
        logger.warning("worker reports unreadable: %s: %s", type(exc).__name__, exc)
        return WorkerMemory([], {}, {}, 0, error=f"{type(exc).__name__}: {exc}")
    children: list[ChildMemory] = []
    limits: dict[str, int] = {}
    recycled: dict[str, int] = {}
    for report in reports:
        host = str(report.get("hostname", "?"))
        limits[host] = int(report.get("max_memory_per_child_bytes") or 0)
        for child in report.get("children") or []:
            owned = child.get("owned_bytes")
            children.append(
                ChildMemory(
                    host,
                    int(child["pid"]),
                    int(child["rss_bytes"]),
                    int(child["threads"]),
                    None if owned is None else int(owned),
                )
            )
        for reason, n in (report.get("recycled") or {}).items():
            recycled[reason] = recycled.get(reason, 0) + int(n)
    children.sort(key=lambda c: (c.hostname, c.pid))
    return WorkerMemory(children, limits, recycled, workers=len(reports))


def dead_by_reason() -> dict[str, dict[str, int]]:
    """{dead_reason: {kind: jobs}} over the dead-letter set (one grouped query)."""
    out: dict[str, dict[str, int]] = {}
    for (kind, reason), n in selectors.dead_letter_counts().items():
        out.setdefault(reason or "unknown", {})[kind] = n
    return out


@dataclass(frozen=True)
class ScheduleRow:
    """One schedule on the overview: its timing, next and last run and its last job's status."""

    pk: int
    name: str
    kind: str
    timing: str
    enabled: bool
    next_run_at: datetime | None
    last_run_at: datetime | None
    last_job_id: str | None
    last_job_status: str | None


def schedules(*, limit: int = 50) -> list[ScheduleRow]:
    """Up to `limit` schedules, enabled first, by name (one query: the last job's status joined)."""
    rows = Schedule.objects.select_related("last_job").order_by("-enabled", "name")[:limit]
    return [
        ScheduleRow(
            pk=s.pk,
            name=s.name,
            kind=s.kind,
            timing=s.timing,
            enabled=s.enabled,
            next_run_at=s.next_run_at,
            last_run_at=s.last_run_at,
            last_job_id=str(s.last_job_id) if s.last_job_id else None,
            last_job_status=s.last_job.status if s.last_job is not None else None,
        )
        for s in rows
    ]
