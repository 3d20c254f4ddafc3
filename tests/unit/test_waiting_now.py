"""Why isn't my job running? Each waiting reason in a test that creates its state (jobs.waiting_now).

Stored reasons (backoff, Retry-After, retry budget, run_after, a held pause) and the live
ones of a queued job (a pause, no worker consuming its queue, backpressure). The
concurrency and rate limits and the fuse are reserved members, not computed yet.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from jobs import pauses, waiting
from jobs.models import Attempt, JobStatus
from jobs.reasons import WaitingReason
from tests.unit.conftest import report_worker

pytestmark = pytest.mark.django_db

DUE = datetime(2026, 11, 30, 10, 1, 14, 500000, tzinfo=UTC)


def _shown(api_client: APIClient, job: Any) -> dict[str, Any]:
    return api_client.get(f"/api/jobs/{job.id}/").json()


@pytest.mark.parametrize(
    ("status", "made"),
    [
        (JobStatus.RETRYING, waiting.for_retry(kind="demo.flaky", delay=8.2)),
        (JobStatus.RETRYING, waiting.for_retry(kind="demo.flaky", delay=30, retry_after=30)),
        (JobStatus.RETRYING, waiting.for_retry(kind="demo.flaky", delay=80, budget_added=74)),
        (JobStatus.RETRYING, waiting.held_by_budget(kind="demo.flaky", held=12)),
        (JobStatus.DELAYED, waiting.for_run_after(run_after=DUE)),
    ],
    ids=["backoff", "retry_after", "retry_budget", "retry_budget_held", "run_after"],
)
def test_waiting_now_stored_reason_with_its_due_time_as_estimate(
    api_client: APIClient, job_factory: Callable[..., Any], status: str, made: Any
) -> None:
    job = job_factory(status=status, next_attempt_at=DUE, **made.fields())

    shown = _shown(api_client, job)

    assert shown["waiting"] == {
        "reason": made.reason.value,
        "detail": made.detail,
        "until": "2026-11-30T10:01:14.500000Z",
    }
    assert shown["estimated_start"] == "2026-11-30T10:01:14.500000Z"


def test_waiting_now_paused_before_its_delivery_and_held_after(
    api_client: APIClient, job_factory: Callable[..., Any], no_reports: None
) -> None:
    report_worker(["default"])
    job = job_factory(published_at=timezone.now())
    pauses.pause(scope="queue", name="default", reason="deploy")

    live = _shown(api_client, job)
    assert live["waiting"]["reason"] == WaitingReason.PAUSED
    assert "queue default paused since" in live["waiting"]["detail"]
    assert live["estimated_start"] is None


def test_waiting_now_no_worker_consumes_the_queue(
    api_client: APIClient, job_factory: Callable[..., Any], no_reports: None
) -> None:
    # given a worker consuming another queue only
    report_worker(["other"])
    job = job_factory()

    shown = _shown(api_client, job)

    assert shown["waiting"]["reason"] == WaitingReason.NO_WORKER
    assert "no live worker consumes queue default" in shown["waiting"]["detail"]
    assert shown["estimated_start"] is None


def test_waiting_now_older_reports_without_queues_say_nothing(
    api_client: APIClient, job_factory: Callable[..., Any], no_reports: None
) -> None:
    report_worker(None)
    assert _shown(api_client, job_factory())["waiting"] is None


def test_waiting_now_backpressure_with_an_estimate(
    api_client: APIClient, job_factory: Callable[..., Any], settings: Any, no_reports: None
) -> None:
    # given a queue at its limit of ready jobs, and starts on it in the last minute
    settings.JOBS_QUEUE_MAX_READY = 2
    settings.JOBS_BACKPRESSURE_OUTBOX_CACHE_SECONDS = 0
    report_worker(["default"])
    old = timezone.now() - timedelta(hours=1)
    ahead = job_factory(enqueued_at=old)
    job = job_factory(enqueued_at=old + timedelta(seconds=1))
    done = job_factory(status=JobStatus.SUCCEEDED)
    Attempt.objects.create(job=done, number=1, started_at=timezone.now())

    shown = _shown(api_client, job)

    assert ahead.id != job.id
    assert shown["waiting"]["reason"] == WaitingReason.BACKPRESSURE
    assert "at its limit of 2" in shown["waiting"]["detail"]
    # one job ahead at one start a minute: about a minute from now
    estimate = datetime.fromisoformat(shown["estimated_start"])
    assert timedelta(seconds=50) < estimate - timezone.now() < timedelta(seconds=70)


def test_waiting_now_list_shows_stored_reasons_only(
    api_client: APIClient, job_factory: Callable[..., Any], no_reports: None
) -> None:
    job_factory()  # queued, no worker: only its page says so

    listed = api_client.get("/api/jobs/").json()["results"]

    assert [(j["waiting"], j["estimated_start"]) for j in listed] == [(None, None)]


def test_waiting_now_next_in_its_queue_has_an_estimate_only(
    api_client: APIClient, job_factory: Callable[..., Any], no_reports: None
) -> None:
    # given a worker on its queue, two jobs ahead and two starts on the queue in the last minute
    report_worker(["default"])
    old = timezone.now() - timedelta(hours=1)
    for _ in range(2):
        job_factory(enqueued_at=old)
    job = job_factory(enqueued_at=old + timedelta(seconds=1))
    done = job_factory(status=JobStatus.SUCCEEDED)
    for number in (1, 2):
        Attempt.objects.create(job=done, number=number, started_at=timezone.now())

    shown = _shown(api_client, job)

    assert shown["waiting"] is None
    estimate = datetime.fromisoformat(shown["estimated_start"])
    assert timedelta(seconds=50) < estimate - timezone.now() < timedelta(seconds=70)


def test_waiting_now_held_jobs_do_not_count_toward_backpressure(
    job_factory: Callable[..., Any], settings: Any
) -> None:
    from jobs import selectors  # noqa: PLC0415 - only this test

    settings.JOBS_BACKPRESSURE_OUTBOX_CACHE_SECONDS = 0
    old = timezone.now() - timedelta(hours=1)
    job_factory(enqueued_at=old, waiting_reason=WaitingReason.PAUSED, waiting_detail="held")
    job_factory(enqueued_at=old)

    assert selectors.BackpressureCache().outbox_count("default") == 1
