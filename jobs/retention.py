"""Retention: delete terminal jobs past their age, with their attempts and History, in batches.

`Retention.from_settings()` reads the JOBS_PRUNE_* settings (ages per
terminal status, the idempotency-key floor, batch size, pause); `problems()`
says what is wrong with them (the jobs.E040 check). `prune()` deletes batch
after batch, each in its own short transaction, oldest first, skipping rows
another transaction holds; `preview()` counts what `prune()` would delete.
Live jobs (queued, delayed, running, retrying) are never touched. Why and
how: docs/retention.md.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import connection, transaction
from django.db.models import Model, Q

from jobs import clock, events
from jobs.models import Attempt, Job, JobStatus

# Oldest first: the cheapest rows to lose go first when a run is stopped early.
PRUNED_STATUSES: tuple[JobStatus, ...] = (
    JobStatus.SUCCEEDED,
    JobStatus.CANCELLED,
    JobStatus.DEAD,
)
# The `table` label of jobs_pruned_total.
PRUNED_TABLES = ("jobs_job", "jobs_attempt")
MAX_BATCH = 10_000
MAX_PAUSE_SECONDS = 60.0
OFF = "off"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


class RetentionError(ValueError):
    """A JOBS_PRUNE_* value that cannot work; the message is one readable line."""


def parse_age(name: str, text: str) -> timedelta | None:
    """`text` ("7d", "36h", "off") as a timedelta, None for "off".

    Raises RetentionError naming `name` when it is not a positive number with a
    unit (s, m, h, d, w) or "off".
    """
    if text.strip().lower() == OFF:
        return None
    match = _AGE.match(text)
    if match is None or float(match.group(1)) <= 0:
        raise RetentionError(
            f"{name} is {text!r}; it must be a positive age like '7d', '36h', '90m' or 'off'"
        )
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


def format_age(age: timedelta | None) -> str:
    """`age` in parse_age's form, in its largest whole unit ("7d", "36h"); "off" for None."""
    if age is None:
        return OFF
    seconds = age.total_seconds()
    for unit in ("d", "h", "m"):
        if seconds % _UNITS[unit] == 0:
            return f"{seconds / _UNITS[unit]:g}{unit}"
    return f"{seconds:g}s"


@dataclass(frozen=True)
class Retention:
    """How long each terminal status is kept (None: forever), and how a prune paces itself.

    `keyed_after` is the least age of a job with an idempotency key (None:
    never pruned). `batch` jobs per transaction; `pause` seconds between batches.
    """

    ages: dict[str, timedelta | None]
    keyed_after: timedelta | None
    batch: int = 500
    pause: float = 0.05

    @classmethod
    def from_settings(cls) -> Retention:
        """The configured retention; raises RetentionError (one line) on a bad value."""
        names = {status: f"JOBS_PRUNE_{status.upper()}_AFTER" for status in PRUNED_STATUSES}
        ages: dict[str, timedelta | None] = {
            status: parse_age(name, getattr(settings, name)) for status, name in names.items()
        }
        keyed = parse_age("JOBS_PRUNE_KEYED_AFTER", settings.JOBS_PRUNE_KEYED_AFTER)
        batch, pause = settings.JOBS_PRUNE_BATCH, settings.JOBS_PRUNE_PAUSE_SECONDS
        if not 1 <= batch <= MAX_BATCH:
            raise RetentionError(f"JOBS_PRUNE_BATCH is {batch}; it must be 1..{MAX_BATCH} jobs")
        if not 0 <= pause <= MAX_PAUSE_SECONDS:
            raise RetentionError(
                f"JOBS_PRUNE_PAUSE_SECONDS is {pause}; it must be 0..{MAX_PAUSE_SECONDS:g} seconds"
            )
        return cls(ages=ages, keyed_after=keyed, batch=batch, pause=pause)


def problems() -> list[str]:
    """What is wrong with the JOBS_PRUNE_* settings (empty when they work)."""
    try:
        Retention.from_settings()
    except RetentionError as exc:
        return [str(exc)]
    return []


@dataclass
class PruneResult:
    """What a prune deleted, per status; `stopped`: it ended before running out of rows."""

    jobs: dict[str, int] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    history: int = 0
    batches: int = 0
    longest_batch_seconds: float = 0.0
    seconds: float = 0.0
    stopped: bool = False

    def as_dict(self) -> dict[str, object]:
        return {
            "jobs": self.jobs,
            "attempts": self.attempts,
            "history": self.history,
            "batches": self.batches,
            "longest_batch_ms": round(self.longest_batch_seconds * 1000, 1),
            "seconds": round(self.seconds, 2),
            "stopped": self.stopped,
        }


def _prunable(status: str, retention: Retention, now: datetime) -> Q | None:
    """Rows of `status` old enough to go (finished before its cutoff), or None: keep all."""
    age = retention.ages.get(status)
    if age is None:
        return None
    cutoff = now - age
    # created_at <= finished_at, so the first term lets the (status, created_at)
    # index bound the walk; a terminal row without finished_at goes by created_at.
    old = Q(status=status, created_at__lt=cutoff) & (
        Q(finished_at__lt=cutoff) | Q(finished_at__isnull=True)
    )
    if retention.keyed_after is None:
        return old & Q(idempotency_key__isnull=True)
    keyed_cutoff = now - retention.keyed_after
    return old & (Q(idempotency_key__isnull=True) | Q(finished_at__lt=keyed_cutoff))


def preview(*, retention: Retention, now: datetime | None = None) -> dict[str, tuple[int, int]]:
    """(jobs, attempts) that `prune` would delete now, per pruned status (a dry run)."""
    now = now or clock.now()
    counts: dict[str, tuple[int, int]] = {}
    for status in PRUNED_STATUSES:
        where = _prunable(status, retention, now)
        if where is None:
            counts[status] = (0, 0)
            continue
        jobs = Job.objects.filter(where)
        counts[status] = (jobs.count(), Attempt.objects.filter(job__in=jobs.values("id")).count())
    return counts


def _delete_rows(model: type[Model], column: str, ids: Sequence[object]) -> int:
    """DELETE rows of `model` whose `column` is one of the job `ids`; returns how many.

    One statement, no rows fetched: QuerySet.delete() would load every Job
    (payload, result and all) to cascade by hand.
    """
    pk = Job._meta.pk
    assert pk is not None
    params = [pk.get_db_prep_value(job_id, connection) for job_id in ids]
    table, name = connection.ops.quote_name(model._meta.db_table), connection.ops.quote_name(column)
    marks = ", ".join(["%s"] * len(params))
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table} WHERE {name} IN ({marks})", params)  # noqa: S608
        return max(cursor.rowcount, 0)


def _delete_batch(
    where: Q, after: datetime | None, size: int
) -> tuple[int, int, int, datetime | None]:
    """One transaction: lock up to `size` prunable rows (skipping locked ones), delete them.

    Returns (jobs, attempts, history rows, created_at of the last job taken).
    """
    rows = Job.objects.filter(where)
    if after is not None:
        # Keyset: each batch starts where the last one ended, so no batch walks
        # the dead index entries its predecessors left behind.
        rows = rows.filter(created_at__gte=after)
    with transaction.atomic():
        taken = list(
            rows.order_by("created_at")
            .select_for_update(skip_locked=True)
            .values_list("id", "created_at")[:size]
        )
        if not taken:
            return 0, 0, 0, after
        ids = [job_id for job_id, _ in taken]
        history, _ = LogEntry.objects.filter(
            content_type=ContentType.objects.get_for_model(Job),
            object_id__in=[str(job_id) for job_id in ids],
        ).delete()
        attempts = _delete_rows(Attempt, "job_id", ids)
        jobs = _delete_rows(Job, "id", ids)
    return jobs, attempts, history, taken[-1][1]


def prune(
    *,
    retention: Retention,
    now: datetime | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    sleep: Callable[[float], object] = time.sleep,
) -> PruneResult:
    """Delete every prunable job (see module docstring), batch by batch; returns the counts.

    `should_stop` is asked before each batch: a True ends the run early
    (`stopped`), having lost nothing, since each batch committed on its own.
    `now` (default: the database's clock) fixes the cutoffs for the whole run.
    Sends events.jobs_pruned after each batch commits.
    """
    now = now or clock.now()
    result = PruneResult()
    started = time.monotonic()
    for status in PRUNED_STATUSES:
        where = _prunable(status, retention, now)
        result.jobs[status], result.attempts[status] = 0, 0
        after: datetime | None = None
        while where is not None:
            if should_stop():
                result.stopped = True
                break
            began = time.monotonic()
            jobs, attempts, history, after = _delete_batch(where, after, retention.batch)
            result.longest_batch_seconds = max(
                result.longest_batch_seconds, time.monotonic() - began
            )
            if jobs:
                result.batches += 1
                result.jobs[status] += jobs
                result.attempts[status] += attempts
                result.history += history
                events.jobs_pruned.send(sender=Job, status=status, table="jobs_job", rows=jobs)
                events.jobs_pruned.send(
                    sender=Job, status=status, table="jobs_attempt", rows=attempts
                )
            if jobs < retention.batch:
                break
            sleep(retention.pause)
        if result.stopped:
            break
    result.seconds = time.monotonic() - started
    return result
