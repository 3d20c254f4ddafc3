"""The job page's times in lifecycle order (jobs.admin.timeline): pure functions of rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from jobs.admin.timeline import end_to_end, enqueued_for, moments
from jobs.models import Attempt, Job, JobStatus

T0 = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _attempt(number: int, start: float, end: float | None) -> Attempt:
    return Attempt(
        number=number, started_at=_at(start), finished_at=None if end is None else _at(end)
    )


def _labels_and_offsets(job: Job, attempts: list[Attempt]) -> list[tuple[str, str, str]]:
    return [(m.label, m.at[-12:], m.since_created) for m in moments(job, attempts)]


def test_a_job_retried_once_reads_in_the_order_things_happened() -> None:
    # given a job created at 0, attempt 1 at 0.1-0.2, re-enqueued for attempt 2 at 0.9,
    # published at 0.95, attempt 2 at 1.0-1.1
    job = Job(
        status=JobStatus.SUCCEEDED,
        attempts_made=2,
        created_at=_at(0),
        started_at=_at(0.1),
        enqueued_at=_at(0.9),
        published_at=_at(0.95),
        finished_at=_at(1.1),
    )
    attempts = [_attempt(1, 0.1, 0.2), _attempt(2, 1.0, 1.1)]

    # then the enqueue is named for attempt 2 and comes after the first start
    assert _labels_and_offsets(job, attempts) == [
        ("created", "10:00:00.000", "+0.000 s"),
        ("first started", "10:00:00.100", "+0.100 s"),
        ("enqueued (attempt 2)", "10:00:00.900", "+0.900 s"),
        ("published (attempt 2)", "10:00:00.950", "+0.950 s"),
        ("started (attempt 2)", "10:00:01.000", "+1.000 s"),
        ("finished", "10:00:01.100", "+1.100 s"),
    ]
    assert end_to_end(job) == 1.1


def test_a_job_run_once_has_no_attempt_numbers() -> None:
    job = Job(
        status=JobStatus.RUNNING,
        attempts_made=1,
        created_at=_at(0),
        enqueued_at=_at(0),
        published_at=_at(0.01),
        started_at=_at(0.05),
    )

    assert [m.label for m in moments(job, [_attempt(1, 0.05, None)])] == [
        "created",
        "enqueued",
        "published",
        "started",
        "finished",
    ]
    assert end_to_end(job) is None


def test_a_job_waiting_for_its_next_attempt_shows_it_not_started() -> None:
    # given attempt 2 failed at 1.1, promoted (enqueued) at 3.0, then held back by the retry
    # budget at its start until 60: the enqueue was for attempt 3, which has not started
    job = Job(
        status=JobStatus.RETRYING,
        attempts_made=2,
        created_at=_at(0),
        started_at=_at(0.1),
        enqueued_at=_at(3.0),
        published_at=_at(3.01),
        next_attempt_at=_at(60),
    )
    attempts = [_attempt(1, 0.1, 0.2), _attempt(2, 1.0, 1.1)]

    assert enqueued_for(job, attempts[-1]) == 3
    assert _labels_and_offsets(job, attempts)[2:] == [
        ("enqueued (attempt 3)", "10:00:03.000", "+3.000 s"),
        ("published (attempt 3)", "10:00:03.010", "+3.010 s"),
        ("started (attempt 3)", "–", ""),
        ("next attempt", "10:01:00.000", "+1 m 00 s"),
        ("finished", "–", ""),
    ]


def test_a_lost_worker_requeue_at_the_same_instant_is_for_the_next_attempt() -> None:
    # the loss is recorded and the job queued again in one transaction: same time
    job = Job(status=JobStatus.QUEUED, attempts_made=1, created_at=_at(0), enqueued_at=_at(5))
    assert enqueued_for(job, _attempt(1, 0.1, 5)) == 2
    assert enqueued_for(job, None) == 1
