"""Retention: delete terminal jobs past their age, with their attempts and History, in batches.

`Retention.from_settings()` reads the JOBS_PRUNE_* settings (ages per
terminal status, the idempotency-key floor, and the pace: duty cycle, batch
target time, largest batch, least pause); `problems()` says what is wrong
with them (the jobs.E040 check). `prune()` deletes batch after batch
(jobs.prune_batch), each in its own short transaction, oldest first,
skipping rows another transaction holds, resting between batches as
jobs.prune_pace says; `preview()` counts what `prune()` would delete.
Live jobs (queued, delayed, running, retrying) are never touched. Why and
how: docs/retention.md.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q

from jobs import clock, events
from jobs.models import Attempt, Job, JobStatus
from jobs.prune_batch import delete_batch
from jobs.prune_pace import MAX_DUTY, MAX_TARGET_MS, MIN_DUTY, MIN_TARGET_MS, Pace

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
    never pruned). `batch`: most jobs per transaction; `pause`: least seconds
    between batches; `duty`: share of wall time spent in batches (0.01..1);
    `target_ms`: a batch's aimed duration (jobs.prune_pace).
    """

    ages: dict[str, timedelta | None]
    keyed_after: timedelta | None
    batch: int = 500
    pause: float = 0.05
    duty: float = 0.4
    target_ms: int = 100

    def pace(self) -> Pace:
        """The pacing rule these settings give."""
        return Pace(
            duty=self.duty,
            target_seconds=self.target_ms / 1000,
            max_batch=self.batch,
            min_pause=self.pause,
        )

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
        duty, target_ms = settings.JOBS_PRUNE_DUTY_CYCLE, settings.JOBS_PRUNE_BATCH_TARGET_MS
        if not MIN_DUTY <= duty <= MAX_DUTY:
            raise RetentionError(
                f"JOBS_PRUNE_DUTY_CYCLE is {duty}; it must be {MIN_DUTY:g}..{MAX_DUTY:g} "
                "(the share of time the prune may spend deleting)"
            )
        if not MIN_TARGET_MS <= target_ms <= MAX_TARGET_MS:
            raise RetentionError(
                f"JOBS_PRUNE_BATCH_TARGET_MS is {target_ms}; "
                f"it must be {MIN_TARGET_MS}..{MAX_TARGET_MS} ms"
            )
        return cls(
            ages=ages,
            keyed_after=keyed,
            batch=batch,
            pause=pause,
            duty=duty,
            target_ms=target_ms,
        )


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
    busy_seconds: float = 0.0
    seconds: float = 0.0
    stopped: bool = False

    def as_dict(self) -> dict[str, object]:
        return {
            "jobs": self.jobs,
            "attempts": self.attempts,
            "history": self.history,
            "batches": self.batches,
            "longest_batch_ms": round(self.longest_batch_seconds * 1000, 1),
            "busy_seconds": round(self.busy_seconds, 2),
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
    Sends events.jobs_pruned after each batch commits. Between batches it
    calls `sleep` with the rest `retention.pace()` gives (the duty cycle), and
    sizes the next batch to last about the target time.
    """
    now = now or clock.now()
    pace = retention.pace()
    result = PruneResult()
    started = time.monotonic()
    size = pace.first_size()
    rest = 0.0
    for status in PRUNED_STATUSES:
        where = _prunable(status, retention, now)
        result.jobs[status], result.attempts[status] = 0, 0
        after: datetime | None = None
        while where is not None:
            if rest:
                # Before the next batch, not after the last: the rest carries
                # across statuses and a finished run ends at once.
                sleep(rest)
                rest = 0.0
            if should_stop():
                result.stopped = True
                break
            began = time.monotonic()
            batch = delete_batch(where, after, size)
            took = time.monotonic() - began
            after = batch.last
            result.busy_seconds += took
            result.longest_batch_seconds = max(result.longest_batch_seconds, took)
            if batch.jobs:
                result.batches += 1
                result.jobs[status] += batch.jobs
                result.attempts[status] += batch.attempts
                result.history += batch.history
                events.jobs_pruned.send(
                    sender=Job, status=status, table="jobs_job", rows=batch.jobs
                )
                events.jobs_pruned.send(
                    sender=Job, status=status, table="jobs_attempt", rows=batch.attempts
                )
                rest = pace.pause_after(took)
            if batch.jobs < size:
                break
            size = pace.next_size(size, took)
        if result.stopped:
            break
    result.seconds = time.monotonic() - started
    return result
