"""The job page's times in lifecycle order, each named for what it is, and its durations.

A job row keeps its creation, its first start and its end, but only the
latest enqueue and publish (a retry, a requeue or a lost worker's
redelivery enqueues the job again). Listed as they are stored, a retried
job read "started" before "enqueued". Here each time says which attempt it
belongs to, and the list is in the order things happen:

    created · first started (when the enqueue is not the first) ·
    enqueued · published · started (of the attempt they were for) ·
    next attempt (retrying) · finished

Durations are named for what they measure: an attempt's `run time` (its
start to its end), the `wait` before it (the previous attempt's end, or the
job's creation, to its start), and the job's `end-to-end` (created to
finished). Pure functions of the rows given: no queries.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jobs.admin.display import at_ms, seconds
from jobs.models import Attempt, Job


@dataclass(frozen=True)
class Moment:
    """One time on the job page: its label, the time, and seconds since the job was created."""

    label: str
    at: str
    since_created: str


def enqueued_for(job: Job, latest: Attempt | None) -> int:
    """The number of the attempt the job's latest enqueue was for.

    The attempt after the latest one when that one had finished by the
    enqueue (a retry promoted, a requeue, a lost worker's redelivery, a
    retry held at its start), else the latest one (it started from it).
    """
    if latest is None:
        return 1
    if latest.finished_at is not None and job.enqueued_at is not None:
        if job.enqueued_at >= latest.finished_at:
            return latest.number + 1
    return latest.number


def moments(job: Job, attempts: list[Attempt]) -> list[Moment]:
    """The job's times in lifecycle order (module docstring); `attempts` oldest first."""
    latest = attempts[-1] if attempts and attempts[-1].number == job.attempts_made else None
    cycle = enqueued_for(job, latest)
    started = next((a.started_at for a in attempts if a.number == cycle), None)
    if cycle == 1:
        started = started or job.started_at
    of = f" (attempt {cycle})" if cycle > 1 else ""
    times: list[tuple[str, datetime | None]] = [("created", job.created_at)]
    if cycle > 1:
        times.append(("first started", job.started_at))
    times += [
        (f"enqueued{of}", job.enqueued_at),
        (f"published{of}", job.published_at),
        (f"started{of}", started),
    ]
    if job.next_attempt_at is not None:
        times.append(("next attempt", job.next_attempt_at))
    times.append(("finished", job.finished_at))
    return [Moment(label, at_ms(value), _since(job.created_at, value)) for label, value in times]


def end_to_end(job: Job) -> float | None:
    """Seconds from the job's creation to its end, or None while it has not ended."""
    if job.finished_at is None or job.created_at is None:
        return None
    # Never negative: creation is stamped by the web host's clock, the end by the database's.
    return max(0.0, (job.finished_at - job.created_at).total_seconds())


def _since(created: datetime | None, value: datetime | None) -> str:
    if created is None or value is None:
        return ""
    return "+" + seconds(max(0.0, (value - created).total_seconds()))
