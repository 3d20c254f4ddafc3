"""A running attempt's progress: kept in memory, written at most every JOBS_PROGRESS_INTERVAL s.

The kind calls `ctx.progress(done, total, message)` as often as it likes
(jobs.kinds.base.AttemptContext); a ProgressReporter keeps the latest
report and writes it when the interval has passed since the last write, and
at once when `done` reaches `total`. A write is one UPDATE of the job's row
(only while that attempt is the one running; on PostgreSQL without waiting
for the WAL flush: a report lost in a crash costs nothing), then jobs.events.
attempt_progress (the gauge, jobs.telemetry) and the `publish` callback
(Flower's PROGRESS state, jobs.tasks). A write that fails is logged and
dropped: progress never fails an attempt. Cost per call without a write:
one clock reading and a comparison (docs/progress.md has the figures).
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from django.db import DatabaseError, connection
from django.db.models.functions import Now

from jobs import events
from jobs.models import Job, JobStatus

logger = logging.getLogger(__name__)

MESSAGE_MAX_CHARS = 200


@dataclass(frozen=True)
class Progress:
    """One report: `done` of `total` units (None: unknown) and a message."""

    done: float
    total: float | None
    message: str

    @property
    def ratio(self) -> float | None:
        """done / total clamped to 0..1, or None when the total is unknown."""
        if not self.total:
            return None
        return max(0.0, min(1.0, self.done / self.total))

    def as_dict(self) -> dict[str, float | str | None]:
        return {
            "done": self.done,
            "total": self.total,
            "ratio": self.ratio,
            "message": self.message,
        }


class ProgressReporter:
    """The progress sink of one attempt (`AttemptContext.progress_sink`)."""

    def __init__(
        self,
        *,
        job_id: uuid.UUID,
        attempt: int,
        kind: str,
        queue: str,
        interval: float,
        publish: Callable[[Progress], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.job_id = job_id
        self.attempt = attempt
        self.kind = kind
        self.queue = queue
        self.interval = interval
        self.publish = publish
        self.clock = clock
        self.pending: Progress | None = None
        self.last_write = -math.inf
        self.writes = 0
        self.reports = 0
        # Seconds spent in this reporter (reports and writes): its cost to the attempt.
        self.seconds = 0.0

    def __call__(self, done: float, total: float | None = None, message: str = "") -> None:
        began = time.perf_counter()
        try:
            if not _valid(done, total):
                return
            self.reports += 1
            self.pending = Progress(float(done), float(total) if total else None, message)
            finished = total is not None and done >= total
            if finished or self.clock() - self.last_write >= self.interval:
                self._write()
        finally:
            self.seconds += time.perf_counter() - began

    def flush(self) -> None:
        """Write the latest report now, if one is waiting."""
        began = time.perf_counter()
        try:
            self._write()
        finally:
            self.seconds += time.perf_counter() - began

    def _write(self) -> None:
        progress, self.pending = self.pending, None
        if progress is None:
            return
        self.last_write = self.clock()
        try:
            _store(self.job_id, self.attempt, progress)
        except DatabaseError as exc:
            logger.warning("progress not written job_id=%s: %s", self.job_id, exc)
            return
        self.writes += 1
        events.attempt_progress.send(
            sender=Job, kind=self.kind, queue=self.queue, ratio=progress.ratio
        )
        if self.publish is not None:
            try:
                self.publish(progress)
            except Exception as exc:  # a monitoring event must never fail the attempt
                logger.warning("progress event not sent job_id=%s: %s", self.job_id, exc)


def _valid(done: float, total: float | None) -> bool:
    if isinstance(done, bool) or not isinstance(done, int | float) or not math.isfinite(done):
        return False
    if done < 0:
        return False
    if total is None:
        return True
    return (
        not isinstance(total, bool)
        and isinstance(total, int | float)
        and math.isfinite(total)
        and total > 0
    )


# One statement, one round trip. set_config(..., true) turns synchronous_commit off
# for this statement's own transaction (autocommit): its commit does not wait for the
# WAL flush, and a report lost in a crash costs nothing. Volatile, so evaluated for
# the row the index finds.
_PG_UPDATE = """
UPDATE jobs_job SET progress_done = %s, progress_total = %s, progress_message = %s,
  progress_at = statement_timestamp()
WHERE id = %s AND status = %s AND attempts_made = %s
  AND set_config('synchronous_commit', 'off', true) = 'off'
"""


def _store(job_id: uuid.UUID, attempt: int, progress: Progress) -> None:
    """Write `progress` on the job's row while `attempt` is its running attempt."""
    message = progress.message[:MESSAGE_MAX_CHARS]
    if connection.vendor == "postgresql" and not connection.in_atomic_block:
        with connection.cursor() as cursor:
            cursor.execute(
                _PG_UPDATE,
                [progress.done, progress.total, message, job_id, JobStatus.RUNNING, attempt],
            )
        return
    Job.objects.filter(id=job_id, status=JobStatus.RUNNING, attempts_made=attempt).update(
        progress_done=progress.done,
        progress_total=progress.total,
        progress_message=message,
        progress_at=Now(),
    )
