"""jobs.pauses and jobs.pause_gate: paused work waits in the database, resume publishes it."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.models import ADDITION, DELETION, LogEntry
from django.contrib.auth import get_user_model
from django.utils import timezone

from jobs import pauses, services
from jobs.errors import JobsError, PauseNotFound
from jobs.models import Attempt, Job, JobStatus, Pause
from jobs.reasons import WaitingReason

pytestmark = pytest.mark.django_db

HOST = "worker-1@unit-box"


def _start(job: Job, attempt: int = 1) -> Any:
    return services.attempt_start(
        job_id=job.id, attempt=attempt, hostname=HOST, pid=os.getpid(), rss_bytes=1000
    )


@pytest.mark.parametrize(("scope", "name"), [("kind", "demo.flaky"), ("queue", "default")])
def test_pause_delivery_is_held_in_the_database(
    job_factory: Callable[..., Any], scope: str, name: str
) -> None:
    # given a published queued job of a paused kind (or queue)
    job = job_factory(published_at=timezone.now())
    pauses.pause(scope=scope, name=name, reason="maintenance")

    # when its delivery arrives
    started = _start(job)

    # then it does not start, spends no attempt and waits unpublished, saying why
    job.refresh_from_db()
    assert started is None
    assert job.status == JobStatus.QUEUED
    assert job.attempts_made == 0
    assert job.published_at is None
    assert job.waiting_reason == WaitingReason.PAUSED
    assert f"{scope} {name} paused since" in job.waiting_detail
    assert "maintenance" in job.waiting_detail
    assert not Attempt.objects.filter(job=job).exists()


def test_pause_other_kind_starts_on_the_fast_path(job_factory: Callable[..., Any]) -> None:
    job = job_factory()
    pauses.pause(scope="kind", name="demo.sleep")

    assert _start(job) is not None
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING


def test_pause_resume_releases_held_jobs_for_publishing(job_factory: Callable[..., Any]) -> None:
    # given two held jobs
    pauses.pause(scope="kind", name="demo.flaky")
    jobs = [job_factory(published_at=timezone.now()) for _ in range(2)]
    for job in jobs:
        assert _start(job) is None
    # while paused, the leader releases nothing and the outbox sweep skips them
    assert services.held_release(limit=10, claimer="leader") == 0
    later = timezone.now() + timedelta(hours=1)
    assert services.outbox_sweep(now=later, limit=10, claimer="leader") == 0

    # when resumed
    pauses.resume(scope="kind", name="demo.flaky")

    # then one leader pass publishes them, no longer waiting, and they start
    assert services.held_release(limit=10, claimer="leader") == 2
    for job in jobs:
        job.refresh_from_db()
        assert job.published_at is not None
        assert job.waiting_reason == ""
        assert _start(job) is not None


def test_pause_leader_holds_due_retries_and_unpublished_rows(
    job_factory: Callable[..., Any],
) -> None:
    pauses.pause(scope="queue", name="default")
    due = job_factory(status=JobStatus.RETRYING, next_attempt_at=timezone.now())
    outbox = job_factory(published_at=None, enqueued_at=timezone.now() - timedelta(hours=1))

    assert services.retries_promote_due(limit=10, claimer="leader") == 1
    assert services.outbox_sweep(limit=10, claimer="leader") == 0

    for job in (due, outbox):
        job.refresh_from_db()
        assert job.status == JobStatus.QUEUED
        assert job.published_at is None
        assert job.waiting_reason == WaitingReason.PAUSED


def test_pause_cancel_works_while_paused(job_factory: Callable[..., Any]) -> None:
    job = job_factory(published_at=timezone.now())
    pauses.pause(scope="kind", name="demo.flaky")
    assert _start(job) is None

    services.job_cancel(job_id=job.id)

    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED
    assert job.waiting_reason == ""
    pauses.resume(scope="kind", name="demo.flaky")
    assert services.held_release(limit=10) == 0


def test_pause_twice_is_one_pause_and_history_records_both_ends() -> None:
    staff = get_user_model().objects.create_user(username="ops", is_staff=True)

    row, created = pauses.pause(scope="kind", name="demo.flaky", actor=staff, via="admin")
    again, created_again = pauses.pause(scope="kind", name="demo.flaky", actor=staff)
    pauses.resume(scope="kind", name="demo.flaky", actor=staff, via="admin")

    assert (created, created_again, again.pk) == (True, False, row.pk)
    assert row.paused_by == staff
    flags = list(
        LogEntry.objects.filter(object_id=str(row.pk))
        .order_by("id")
        .values_list("action_flag", flat=True)
    )
    assert flags == [ADDITION, DELETION]
    assert not Pause.objects.exists()


@pytest.mark.parametrize(
    ("scope", "name", "field"),
    [("fleet", "demo.flaky", "scope"), ("kind", "no.such", "name"), ("queue", "nope", "name")],
)
def test_pause_bad_input_is_refused(scope: str, name: str, field: str) -> None:
    with pytest.raises(JobsError) as caught:
        pauses.pause(scope=scope, name=name)
    assert caught.value.field == field


def test_pause_resume_of_what_is_not_paused_is_refused() -> None:
    with pytest.raises(PauseNotFound):
        pauses.resume(scope="kind", name="demo.flaky")


def test_pause_collector_reports_every_kind_and_queue_and_the_paused_age() -> None:
    from prometheus_client import CollectorRegistry  # noqa: PLC0415 - only this test

    from jobs.telemetry.collectors import PauseCollector  # noqa: PLC0415 - only this test

    registry = CollectorRegistry()
    registry.register(PauseCollector())
    kind = {"scope": "kind", "name": "demo.flaky"}
    queue = {"scope": "queue", "name": "default"}
    assert registry.get_sample_value("jobs_paused", kind) == 0
    assert registry.get_sample_value("jobs_paused_seconds", queue) == 0

    row, _ = pauses.pause(scope="kind", name="demo.flaky")
    Pause.objects.filter(pk=row.pk).update(paused_at=timezone.now() - timedelta(seconds=90))

    assert registry.get_sample_value("jobs_paused", kind) == 1
    age = registry.get_sample_value("jobs_paused_seconds", kind)
    assert age is not None
    assert 89 <= age <= 120
    assert registry.get_sample_value("jobs_paused", queue) == 0


def test_pause_held_row_is_never_stamped_published(job_factory: Callable[..., Any]) -> None:
    from jobs.services.publish_stamps import write_stamps  # noqa: PLC0415 - only this test

    # given a job whose delivery a pause held before its batched publish stamp was written
    job = job_factory(published_at=None)
    pauses.pause(scope="kind", name="demo.flaky")
    assert _start(job) is None

    # when the stamp for its publish arrives late
    assert write_stamps([(job.id, 1)]) == 0

    # then it stays unpublished: only the leader's release after the resume publishes it
    job.refresh_from_db()
    assert job.published_at is None
    assert job.waiting_reason == WaitingReason.PAUSED
