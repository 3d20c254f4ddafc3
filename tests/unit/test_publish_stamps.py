"""`published_at` stamps: which rows one write stamps, and the writer thread that batches them."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.core.checks import Error
from django.db import ProgrammingError
from django.utils import timezone

from devstack.services import wait_for
from jobs import broker, checks, selectors
from jobs.models import Attempt, Job, JobStatus
from jobs.services import publish_stamps
from jobs.services.publish_stamps import StampWriter, stamp_grace_seconds, write_stamps


def _stamped(job: Job) -> bool:
    job.refresh_from_db(fields=["published_at"])
    return job.published_at is not None


@pytest.mark.django_db
def test_write_stamps_marks_only_rows_waiting_for_that_attempts_stamp(
    job_factory: Callable[..., Job],
) -> None:
    # given rows in each state a published attempt 1 can meet
    queued = job_factory(published_at=None)
    started = job_factory(status=JobStatus.RUNNING, attempts_made=1, published_at=None)
    # (a retry requeued it for attempt 2, whose own publish is still to come)
    next_attempt = job_factory(attempts_made=1, published_at=None)
    earlier = timezone.now() - timedelta(minutes=1)
    already = job_factory(published_at=earlier)

    # when attempt 1 of each is stamped in one write
    stamped = write_stamps([(job.id, 1) for job in (queued, started, next_attempt, already)])

    # then the queued and the started rows are stamped, the others keep theirs
    assert stamped == 2
    assert _stamped(queued)
    assert _stamped(started)
    assert not _stamped(next_attempt)
    already.refresh_from_db()
    assert already.published_at == earlier
    assert write_stamps([]) == 0


@pytest.mark.django_db
def test_a_stamp_written_after_the_attempt_started_reads_no_later_than_that_start(
    job_factory: Callable[..., Job],
) -> None:
    # given attempt 2 started by a worker before the stamp of its publish was written
    job = job_factory(status=JobStatus.RUNNING, attempts_made=2, published_at=None)
    began = timezone.now() - timedelta(milliseconds=5)
    Attempt.objects.create(
        job=job,
        number=1,
        worker_hostname="w",
        worker_pid=1,
        started_at=began - timedelta(seconds=9),
        finished_at=began,
    )
    Attempt.objects.create(job=job, number=2, worker_hostname="w", worker_pid=1, started_at=began)

    # when the stamp is written
    assert write_stamps([(job.id, 2)]) == 1

    # then the publish reads at that start at the latest (it came first)
    job.refresh_from_db()
    assert job.published_at == began


@pytest.mark.django_db(transaction=True)
def test_writer_thread_stamps_a_batch_after_its_delay_and_flush_waits_for_it(
    settings: Any, job_factory: Callable[..., Job]
) -> None:
    # given batched stamps and 30 published rows
    settings.JOBS_PUBLISH_STAMP_DELAY_SECONDS = 0.2
    writer = StampWriter()
    jobs = [job_factory(published_at=None) for _ in range(30)]

    # when their stamps are handed to the writer
    for job in jobs:
        writer.add(job.id, 1)

    # then none is written by the caller, and flush returns once all are
    assert writer.pending() == 30
    assert not any(_stamped(job) for job in jobs)
    assert writer.flush(timeout=10)
    assert writer.pending() == 0
    assert all(_stamped(job) for job in jobs)


@pytest.mark.django_db(transaction=True)
def test_writer_thread_outlives_a_failed_batch_and_logs_it(
    settings: Any,
    job_factory: Callable[..., Job],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # given a writer whose first write fails with an error that is not a lost connection
    settings.JOBS_PUBLISH_STAMP_DELAY_SECONDS = 0.01
    writer = StampWriter()
    calls: list[int] = []

    def failing_once(stamps: Any) -> int:
        calls.append(len(list(stamps)))
        if len(calls) == 1:
            raise ProgrammingError("relation is gone")
        return write_stamps(stamps)

    monkeypatch.setattr(publish_stamps, "write_stamps", failing_once)
    lost, kept = job_factory(published_at=None), job_factory(published_at=None)

    # when one stamp fails and a later one is handed over
    with caplog.at_level(logging.WARNING, logger="jobs.services.publish_stamps"):
        writer.add(lost.id, 1)
        assert writer.flush(timeout=10)
        writer.add(kept.id, 1)
        assert writer.flush(timeout=10)

    # then the failure is logged for the sweep to cover, and the thread writes the next one
    assert "published but not stamped: 1 jobs" in caplog.text
    assert not _stamped(lost)
    assert _stamped(kept)


def test_writer_does_not_wait_its_delay_while_a_full_batch_is_pending(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a long delay (2 s: far above anything a loaded machine adds between
    # two writes, which took 0.2503 s against the 0.25 s of the longest valid
    # delay here once) and writes that only record when they ran
    settings.JOBS_PUBLISH_STAMP_DELAY_SECONDS = 2.0
    writes: list[tuple[float, int]] = []

    def recording(stamps: Any) -> int:
        writes.append((time.monotonic(), len(list(stamps))))
        return 0

    monkeypatch.setattr(publish_stamps, "write_stamps", recording)
    monkeypatch.setattr(publish_stamps, "close_old_connections", lambda: None)
    writer = StampWriter()

    # when two and a half batches' worth are pending as its thread starts (queued
    # with the thread held back: a loaded machine could otherwise still be adding
    # when the first batch's delay ends, and the second batch would not be full)
    start_thread = writer._ensure_thread
    monkeypatch.setattr(writer, "_ensure_thread", lambda: None)
    for _ in range(2 * publish_stamps.MAX_BATCH + 100):
        writer.add(uuid.uuid4(), 1)
    with writer._lock:
        start_thread()
        writer._wake.notify_all()
    wait_for(lambda: writer.pending() == 0, timeout=20, what="all written")

    # then the second full batch followed the first without the delay between
    # them; the rest waited for it
    assert [size for _, size in writes] == [500, 500, 100]
    assert writes[1][0] - writes[0][0] < 1.0, writes
    assert writes[2][0] - writes[1][0] >= 1.5, writes


def test_flush_without_a_thread_returns_at_once() -> None:
    assert StampWriter().flush(timeout=0.01)


@pytest.mark.django_db
def test_outbox_count_leaves_out_rows_whose_stamp_may_be_on_its_way(
    settings: Any, job_factory: Callable[..., Job]
) -> None:
    # given batched stamps: one unpublished row of a second ago, one of a minute ago
    settings.JOBS_PUBLISH_STAMP_DELAY_SECONDS = 0.05
    settings.JOBS_BACKPRESSURE_OUTBOX_CACHE_SECONDS = 0
    assert stamp_grace_seconds() == 1.0
    job_factory(published_at=None, enqueued_at=timezone.now())
    job_factory(published_at=None, enqueued_at=timezone.now() - timedelta(minutes=1))

    # then while the broker answers only the older one is in the outbox (the
    # younger one's message is counted by the broker), and both once it does not
    assert selectors._outbox_count("default") == 1
    broker.mark_unreachable()
    assert selectors.queue_ready_count(queue="default") == 2

    # and without batching both count at once
    settings.JOBS_PUBLISH_STAMP_DELAY_SECONDS = 0
    broker.mark_reachable()
    assert stamp_grace_seconds() == 0
    assert selectors._outbox_count("default") == 2


@pytest.mark.parametrize("delay", [-0.1, 0.5, "0.05", True])
def test_stamp_delay_outside_its_range_is_a_check_error(settings: Any, delay: Any) -> None:
    settings.JOBS_PUBLISH_STAMP_DELAY_SECONDS = delay

    (error,) = checks.check_publish_stamp_delay(None)

    assert isinstance(error, Error)
    assert error.id == "jobs.E007"
    assert "JOBS_PUBLISH_STAMP_DELAY_SECONDS" in error.msg


@pytest.mark.parametrize("delay", [0, 0.05, 0.25])
def test_stamp_delay_in_range_passes(settings: Any, delay: Any) -> None:
    settings.JOBS_PUBLISH_STAMP_DELAY_SECONDS = delay

    assert checks.check_publish_stamp_delay(None) == []


def test_stamps_of_unknown_jobs_write_nothing(db: None) -> None:
    assert write_stamps([(uuid.uuid4(), 1)]) == 0
