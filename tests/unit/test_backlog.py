"""jobs.telemetry.backlog: jobs_backlog{queue, state}, the autoscaling signal, from the database."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client import CollectorRegistry

from jobs.models import JobStatus
from jobs.telemetry.backlog import BacklogCollector, BacklogState, backlog_counts


def _sample(registry: CollectorRegistry, queue: str, state: str) -> float | None:
    return registry.get_sample_value("jobs_backlog", {"queue": queue, "state": state})


@pytest.mark.django_db
def test_backlog_counts_what_could_start_now_and_what_runs(
    settings: Any, job_factory: Callable[..., Any]
) -> None:
    # given on `default`: 2 queued (one unpublished), 1 running, a retry and a delayed
    # start already due, a retry an hour away, a delayed start an hour away, terminal jobs;
    # and on `bulk`: 1 running
    settings.JOBS_QUEUES = ["default", "bulk"]
    now, hour = timezone.now(), timedelta(hours=1)
    job_factory(published_at=now)
    job_factory(published_at=None)
    job_factory(status=JobStatus.RUNNING)
    job_factory(status=JobStatus.RETRYING, next_attempt_at=now - timedelta(seconds=5))
    job_factory(status=JobStatus.DELAYED, next_attempt_at=now - timedelta(seconds=5))
    job_factory(status=JobStatus.RETRYING, next_attempt_at=now + hour)
    job_factory(status=JobStatus.DELAYED, next_attempt_at=now + hour)
    for status in (JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED):
        job_factory(status=status)
    job_factory(status=JobStatus.RUNNING, queue="bulk")
    # when it is counted, in one statement
    with CaptureQueriesContext(connection) as queries:
        counts = backlog_counts()
    # then waiting = queued + due, running = in flight, per queue; held-back jobs are not counted
    assert len(queries.captured_queries) == 1
    assert counts == {
        "default": {BacklogState.WAITING: 4, BacklogState.RUNNING: 1},
        "bulk": {BacklogState.WAITING: 0, BacklogState.RUNNING: 1},
    }


@pytest.mark.django_db
def test_backlog_is_zero_for_an_idle_queue(settings: Any, job_factory: Callable[..., Any]) -> None:
    # given only finished jobs
    settings.JOBS_QUEUES = ["default"]
    job_factory(status=JobStatus.SUCCEEDED)
    registry = CollectorRegistry()
    registry.register(BacklogCollector())
    # then both states read 0 (present, so a scaler sees 0 and scales to its minimum)
    for state in BacklogState:
        assert _sample(registry, "default", state) == 0.0


@pytest.mark.django_db
def test_backlog_collector_reports_nothing_when_the_database_fails(
    settings: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # given a database that fails the query
    def fail(**_: Any) -> None:
        raise RuntimeError("database gone")

    monkeypatch.setattr("jobs.telemetry.backlog.backlog_counts", fail)
    registry = CollectorRegistry()
    registry.register(BacklogCollector(close_connection=True))
    # then no sample (never a made-up 0, which would scale workers down) and one warning
    assert _sample(registry, "default", "waiting") is None
    assert "backlog collection failed: RuntimeError: database gone" in caplog.text
