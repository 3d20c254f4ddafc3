"""After a failed broker call a process skips the calls it can do without, for a while.

A frozen Redis fails each call only after the socket timeout; the web must
not pay it on every request. Against the unit tests' private Redis.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from devstack.services import RedisServer
from jobs import broker, selectors, services
from jobs.models import Job, JobStatus

pytestmark = pytest.mark.django_db


def _ready(server: RedisServer) -> int:
    return int(redis.Redis.from_url(server.url).llen("default"))


def test_after_a_failure_submissions_skip_the_broker_and_leave_the_publish_to_the_outbox(
    private_broker: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # given a broker whose reads fail once
    calls = {"n": 0}

    def failing(queues: list[str]) -> dict[str, int]:
        calls["n"] += 1
        raise redis.TimeoutError("Timeout reading from socket")

    monkeypatch.setattr(broker, "ready_counts", failing)
    before = _ready(private_broker)

    # when two jobs are submitted, one after the other
    with django_capture_on_commit_callbacks(execute=True) as published:
        first = services.job_submit(kind="demo.flaky", payload={"fail_times": 0})
        second = services.job_submit(kind="demo.flaky", payload={"fail_times": 0})

    # then the broker was asked once; both jobs were taken, queued for the outbox sweep
    assert calls["n"] == 1
    assert len(published) >= 2  # the publishes ran, and deferred themselves
    assert broker.in_backoff()
    for result in (first, second):
        job = Job.objects.get(id=result.job.id)
        assert job.status == JobStatus.QUEUED
        assert job.published_at is None
    assert _ready(private_broker) == before


def test_the_backoff_ends_and_the_broker_is_used_again(
    private_broker: RedisServer, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.JOBS_BROKER_BACKOFF_SECONDS = 0.0
    broker.mark_unreachable()
    assert not broker.in_backoff()

    with django_capture_on_commit_callbacks(execute=True):
        result = services.job_submit(kind="demo.flaky", payload={"fail_times": 0})

    assert Job.objects.get(id=result.job.id).published_at is not None
    assert selectors.queue_ready_count(queue="default") >= 1


def test_after_the_backoff_one_caller_probes_while_the_others_still_skip(settings: Any) -> None:
    settings.JOBS_BROKER_BACKOFF_SECONDS = 0.0
    broker.mark_unreachable()

    assert broker.recently_unreachable() is False  # this caller probes the broker
    assert broker.recently_unreachable() is True  # the others skip meanwhile
    broker.mark_reachable()  # the probe succeeded
    assert broker.recently_unreachable() is False
    assert broker.recently_unreachable() is False
