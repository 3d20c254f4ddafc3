"""The backpressure's counts, reused per process: the outbox for JOBS_BACKPRESSURE_OUTBOX_CACHE_SECONDS,
the broker's ready messages for JOBS_BACKPRESSURE_READY_CACHE_SECONDS while far below the limit."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs import selectors

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    # Forgets the outbox counts and the broker readings alike.
    selectors.forget_outbox_count()
    yield
    selectors.forget_outbox_count()


def _outbox_queries() -> int:
    with CaptureQueriesContext(connection) as queries:
        selectors._outbox_count("default")
    return len(queries.captured_queries)


def test_outbox_count_reused_within_its_age_then_forgotten(
    settings: Any, job_factory: Callable[..., Any]
) -> None:
    # given a cache age of a minute and one unpublished row
    settings.JOBS_BACKPRESSURE_OUTBOX_CACHE_SECONDS = 60
    job_factory(published_at=None)

    # when the count is read twice, then once after a failed publish forgot it
    first = selectors._outbox_count("default")
    job_factory(published_at=None)
    reused, reused_queries = selectors._outbox_count("default"), _outbox_queries()
    selectors.forget_outbox_count("default")
    fresh = selectors._outbox_count("default")

    # then the second read reused the first (no query) and the third counted again
    assert (first, reused, reused_queries) == (1, 1, 0)
    assert fresh == 2


def test_outbox_count_read_every_time_at_age_zero(
    settings: Any, job_factory: Callable[..., Any]
) -> None:
    settings.JOBS_BACKPRESSURE_OUTBOX_CACHE_SECONDS = 0
    job_factory(published_at=None)
    assert selectors._outbox_count("default") == 1
    job_factory(published_at=None)
    assert (_outbox_queries(), selectors._outbox_count("default")) == (1, 2)


def test_ready_reading_reused_below_half_the_limit_then_read_every_time(
    settings: Any, broker_redis: redis.Redis
) -> None:
    # given a reading reused for a minute and a limit of 10, with 2 messages ready
    settings.JOBS_BACKPRESSURE_READY_CACHE_SECONDS = 60
    broker_redis.rpush("default", "a", "b")
    first = selectors.queue_ready_count(queue="default", limit=10)

    # when another process publishes 6 more
    broker_redis.rpush("default", *"cdefgh")
    counts = [selectors.queue_ready_count(queue="default", limit=10) for _ in range(4)]

    # then the first reading plus each submission it admitted is used while
    # below half the limit (2 + 1, 2 + 2), and from 5 on the broker is read (8)
    assert first == 2
    assert counts == [3, 4, 8, 8]


def test_ready_count_without_a_limit_or_cache_age_reads_the_broker_every_time(
    settings: Any, broker_redis: redis.Redis
) -> None:
    settings.JOBS_BACKPRESSURE_READY_CACHE_SECONDS = 60
    assert selectors.queue_ready_count(queue="default") == 0
    broker_redis.rpush("default", "a")
    assert selectors.queue_ready_count(queue="default") == 1

    settings.JOBS_BACKPRESSURE_READY_CACHE_SECONDS = 0
    assert selectors.queue_ready_count(queue="default", limit=100) == 1
    broker_redis.rpush("default", "b")
    assert selectors.queue_ready_count(queue="default", limit=100) == 2


def test_ready_reading_forgotten_after_a_failure_so_the_next_count_reads_the_broker(
    settings: Any, broker_redis: redis.Redis
) -> None:
    # given a reading of an empty queue, reused for a minute
    settings.JOBS_BACKPRESSURE_READY_CACHE_SECONDS = 60
    assert selectors.queue_ready_count(queue="default", limit=100) == 0
    broker_redis.rpush("default", "a", "b", "c")
    assert selectors.queue_ready_count(queue="default", limit=100) == 1

    # when a publish or a read of this process failed (it forgets what it counted)
    selectors.forget_outbox_count("default")

    # then the next count reads the broker again
    assert selectors.queue_ready_count(queue="default", limit=100) == 3
