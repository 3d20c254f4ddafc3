"""Fixtures for the integration tests (see harness.py for what a platform is).

Most tests share one session platform (`platform`); tests that need a
different environment (a queue limit, an hour-long backoff, a Redis
restart) build their own with `platform_factory`.

Nothing here uses pytest-django's database fixtures: the tests are black-box
over HTTP, and read the database directly with psycopg only to count rows.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.harness import FLAKY_POLICY, Platform, PlatformFactory, require_postgres


@pytest.fixture(scope="session")
def _logroot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("integration-logs")


@pytest.fixture(scope="session")
def platform(_logroot: Path) -> Iterator[Platform]:
    """The shared platform: web, a 2-process worker and the scheduler.

    demo.flaky retries with FLAKY_POLICY (fast backoff).
    """
    require_postgres()
    factory = PlatformFactory(logroot=_logroot)
    try:
        yield factory(
            "shared", env={"JOBS_KIND_OVERRIDES": json.dumps({"demo.flaky": FLAKY_POLICY})}
        )
    finally:
        factory.close()


@pytest.fixture
def platform_factory(_logroot: Path) -> Iterator[Callable[..., Platform]]:
    """Build a platform with its own environment; torn down when the test ends."""
    require_postgres()
    factory = PlatformFactory(logroot=_logroot)
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture(scope="session")
def api_platform(_logroot: Path) -> Iterator[Platform]:
    """The web alone (gunicorn + PostgreSQL + Redis), for tests of what the API accepts.

    No worker or scheduler: accepted jobs stay queued and nothing runs, so
    thousands of generated requests leave no work behind. The ready-queue
    limit is lifted, so backpressure (a deliberate 503) never answers them.
    """
    require_postgres()
    factory = PlatformFactory(logroot=_logroot)
    try:
        yield factory(
            "api",
            env={"JOBS_QUEUE_MAX_READY": str(10**9)},
            worker=False,
            scheduler=False,
        )
    finally:
        factory.close()


# The broker matrix (`make test-rabbitmq`): a test taking `broker_platform_factory`
# runs once per broker; the RabbitMQ run carries the `rabbitmq` marker.
BROKERS = ["redis", pytest.param("rabbitmq", marks=pytest.mark.rabbitmq)]


@pytest.fixture(params=BROKERS)
def broker(request: pytest.FixtureRequest) -> str:
    """The broker of this run of a matrix test: "redis" or "rabbitmq" (its own vhost)."""
    return str(request.param)


@pytest.fixture
def broker_platform_factory(
    platform_factory: Callable[..., Platform], broker: str
) -> Callable[..., Platform]:
    """platform_factory with the matrix's broker."""
    return functools.partial(platform_factory, broker=broker)
