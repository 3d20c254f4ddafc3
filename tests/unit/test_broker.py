"""jobs.broker and the backpressure count: every kombu priority sub-queue is counted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from celery import Celery

from devstack.services import free_port
from jobs import broker, selectors
from jobs.models import JobStatus
from jobs.tasks import run_attempt_task


def test_broker_queue_keys_cover_every_priority_step() -> None:
    assert broker.queue_keys("default") == [
        "default",
        "default\x06\x163",
        "default\x06\x166",
        "default\x06\x169",
    ]


def test_broker_queue_keys_respect_prefix_and_steps(settings: Any) -> None:
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {
        **settings.CELERY_BROKER_TRANSPORT_OPTIONS,
        "global_keyprefix": "app:",
        "priority_steps": [0, 5],
    }

    assert broker.queue_keys("reports") == ["app:reports", "app:reports\x06\x165"]


def test_broker_ready_counts_sums_all_sub_queues(broker_redis: redis.Redis) -> None:
    # given messages on every priority list of one queue and one on another queue
    for n, key in enumerate(broker.queue_keys("default"), start=1):
        broker_redis.rpush(key, *[f"m{i}" for i in range(n)])
    broker_redis.rpush("reports", "m")

    # when counting
    counts = broker.ready_counts(["default", "reports", "empty"])

    # then each queue's count is the sum of its lists
    assert counts == {"default": 1 + 2 + 3 + 4, "reports": 1, "empty": 0}


def test_broker_ready_counts_messages_celery_published_with_priorities(
    broker_redis: redis.Redis,
) -> None:

    # given messages published by Celery itself, with and without priority
    for priority in (None, 0, 4, 9):
        run_attempt_task.apply_async(
            args=["00000000-0000-0000-0000-000000000000", 1],
            queue="default",
            priority=priority,
            retry=False,
        )

    # then our count sees all of them, whichever list kombu chose
    used = [key for key in broker_redis.keys("default*") if broker_redis.type(key) == b"list"]
    assert len(used) >= 2, used
    assert broker.ready_counts(["default"]) == {"default": 4}


def test_broker_ready_counts_unreachable_raises(settings: Any) -> None:
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{free_port()}/0"

    with pytest.raises(redis.RedisError):
        broker.ready_counts(["default"])


@pytest.mark.django_db
def test_queue_ready_count_adds_unpublished_rows(
    broker_redis: redis.Redis, job_factory: Callable[..., Any]
) -> None:
    # given two ready messages, one unpublished queued row and rows that do not count
    broker_redis.rpush("default", "a")
    broker_redis.rpush("default\x06\x166", "b")
    job_factory()
    job_factory(published_at="2024-01-01T00:00:00Z")
    job_factory(status=JobStatus.RETRYING)
    job_factory(queue="reports")

    # then the count is messages plus the outbox of this queue
    assert selectors.queue_ready_count(queue="default") == 3


@pytest.mark.django_db
def test_queue_ready_count_broker_down_counts_outbox_only(
    settings: Any, job_factory: Callable[..., Any]
) -> None:
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{free_port()}/0"
    job_factory()

    assert selectors.queue_ready_count(queue="default") == 1


def test_queue_max_ready_per_queue_override(settings: Any) -> None:
    settings.JOBS_QUEUE_MAX_READY = 100
    settings.JOBS_QUEUE_MAX_READY_OVERRIDES = {"reports": 3}

    assert selectors.queue_max_ready(queue="reports") == 3
    assert selectors.queue_max_ready(queue="default") == 100


def test_publish_uses_our_app_even_when_another_celery_app_is_current(
    broker_redis: redis.Redis,
) -> None:

    # given another Celery app made in this process, which becomes the current app
    Celery("someone-else", broker=f"redis://127.0.0.1:{free_port()}/0")

    # when a job message is published
    run_attempt_task.apply_async(
        args=["00000000-0000-0000-0000-000000000000", 1], queue="default", retry=False
    )

    # then it still goes to our broker
    assert broker.ready_counts(["default"]) == {"default": 1}
