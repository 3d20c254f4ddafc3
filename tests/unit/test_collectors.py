"""jobs.telemetry.collectors.QueueDepthCollector: what the web and the scheduler serve of the queues."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from prometheus_client import CollectorRegistry

from devstack.services import free_port
from jobs.telemetry.collectors import QueueDepthCollector


def _registry(collector: QueueDepthCollector) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(collector)
    return registry


@pytest.mark.django_db
def test_queue_depth_leaves_out_the_broker_parts_it_could_not_read(
    settings: Any, job_factory: Callable[..., Any]
) -> None:
    # given a job queued 10 minutes ago, and a broker nobody listens for
    job_factory(enqueued_at=timezone.now() - timedelta(minutes=10), published_at=timezone.now())
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{free_port()}/0"
    # when the web's collector is scraped
    registry = _registry(QueueDepthCollector())
    # then the oldest job's age and the database's parts are there, the broker's are not (not 0)
    age = registry.get_sample_value("jobs_queue_oldest_age_seconds", {"queue": "default"})
    assert age is not None
    assert 590 <= age <= 700, age
    scheduled = {"queue": "default", "state": "scheduled"}
    assert registry.get_sample_value("jobs_queue_depth", scheduled) == 0.0
    assert registry.get_sample_value("jobs_queue_depth", {**scheduled, "state": "ready"}) is None
    assert registry.get_sample_value("celery_queue_length", {"queue_name": "default"}) is None


@pytest.mark.django_db
def test_the_schedulers_queue_depth_serves_what_the_backlog_alerts_read(
    broker_redis: Any, job_factory: Callable[..., Any]
) -> None:
    # given a queued job and a dead one
    job_factory(published_at=timezone.now())
    job_factory(status="dead", dead_reason="exhausted")
    # when both collectors are scraped
    web = _registry(QueueDepthCollector())
    scheduler = _registry(QueueDepthCollector(backlog_only=True, close_connection=True))
    # then both serve the depth by part and the oldest age; only the web serves what
    # users sum: celery_queue_length (celery-exporter's, by queue_name) and the dead letters
    ready = {"queue": "default", "state": "ready"}
    dead = {"kind": "demo.flaky", "reason": "exhausted"}
    for registry in (web, scheduler):
        assert registry.get_sample_value("jobs_queue_depth", ready) == 0.0
        assert registry.get_sample_value("jobs_queue_oldest_age_seconds", {"queue": "default"})
    assert web.get_sample_value("celery_queue_length", {"queue_name": "default"}) == 0.0
    assert web.get_sample_value("jobs_dead_letters", dead) == 1.0
    assert scheduler.get_sample_value("celery_queue_length", {"queue_name": "default"}) is None
    assert scheduler.get_sample_value("jobs_dead_letters", dead) is None
