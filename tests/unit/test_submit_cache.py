"""The backpressure's outbox count, reused per process for JOBS_BACKPRESSURE_OUTBOX_CACHE_SECONDS."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs import selectors

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
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
