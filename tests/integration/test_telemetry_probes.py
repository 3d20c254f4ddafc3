"""The web and the scheduler name a dependency outage, and keep serving the queues they can read.

Issue 19, item 4: "Queue depth and oldest-job age keep being exported when
one process cannot read them", and the honest signals the outage alerts
need (jobs_broker_up, jobs_database_up, observability.probes). One platform
without a worker (a submitted job stays queued); its own redis-server is
stopped and started; its database refuses connections
(`ALLOW_CONNECTIONS false`, every session ended) and accepts them again; its
web is stopped while the scheduler still serves the oldest job's age.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
import pytest

from devstack.services import wait_for
from tests.integration.harness import Platform, require_postgres
from tests.integration.telemetry import Samples, covers, scrape
from tests.integration.test_faults_database import terminate_backends

DEFAULT = {"queue": "default"}
READY = {"queue": "default", "state": "ready"}
SCHEDULED = {"queue": "default", "state": "scheduled"}


def _endpoints(platform: Platform) -> dict[str, str]:
    return {"web": platform.url("/metrics"), "scheduler": platform.scheduler_metrics_url}


def _wait_all(
    platform: Platform, what: str, check: Callable[[Samples], bool], *, timeout: float = 30
) -> dict[str, Samples]:
    """Scrape the web and the scheduler until `check` holds for both; return the last scrapes."""
    last: dict[str, Samples] = {}

    def holds() -> bool:
        for name, url in _endpoints(platform).items():
            last[name] = scrape(url)
        return all(check(samples) for samples in last.values())

    try:
        wait_for(holds, timeout=timeout, interval=0.25, what=what)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; last: { {n: s.values for n, s in last.items()} }") from None
    return last


@contextmanager
def database_refusing(platform: Platform) -> Iterator[None]:
    """The platform's database refuses new connections and has none left, until the block ends."""
    name = platform.database_url.rsplit("/", 1)[1].split("?", 1)[0]
    admin = require_postgres().replace("postgres://", "postgresql://", 1)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
    terminate_backends(platform)
    try:
        yield
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')


@pytest.mark.integration
@pytest.mark.timeout(300)
@covers("jobs_broker_up", "jobs_database_up")
def test_web_and_scheduler_probe_broker_and_database_and_serve_the_queues_they_can_read(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a platform without workers and one queued job
    platform = platform_factory("probes", worker=False)
    platform.submit("demo.flaky", {"fail_times": 0})
    # then the web and the scheduler both read their dependencies up and serve the queue
    _wait_all(
        platform,
        "both probes up, the job ready",
        lambda s: (
            s.get("jobs_broker_up") == 1.0
            and s.get("jobs_database_up") == 1.0
            and s.get("jobs_queue_depth", READY) == 1.0
            and (s.get("jobs_queue_oldest_age_seconds", DEFAULT) or 0) > 0
        ),
    )
    # and celery_queue_length is the web's alone (celery-exporter's users sum it)
    assert (
        scrape(platform.scheduler_metrics_url).get("celery_queue_length", {"queue_name": "default"})
        is None
    )

    # when the broker stops
    platform.redis.stop()
    # then both read jobs_broker_up 0 (not absent), the broker's parts are left out
    # (not reported as 0), and what the database holds is still served
    scrapes = _wait_all(
        platform, "broker probe 0", lambda s: s.get("jobs_broker_up") == 0.0, timeout=15
    )
    for samples in scrapes.values():
        assert samples.get("jobs_database_up") == 1.0
        assert samples.get("jobs_queue_depth", READY) is None
        assert samples.get("jobs_queue_depth", SCHEDULED) == 0.0
        assert (samples.get("jobs_queue_oldest_age_seconds", DEFAULT) or 0) > 0
        assert samples.seconds < 3.0, samples.seconds
    # when it is back, so is the probe
    platform.redis.start()
    _wait_all(platform, "broker probe 1", lambda s: s.get("jobs_broker_up") == 1.0)

    # when the database refuses connections
    with database_refusing(platform):
        # then both read jobs_database_up 0, their /metrics still answer, and the
        # queue gauges (read from the database) are left out
        scrapes = _wait_all(
            platform, "database probe 0", lambda s: s.get("jobs_database_up") == 0.0, timeout=15
        )
        for samples in scrapes.values():
            assert samples.get("jobs_broker_up") == 1.0
            assert samples.get("jobs_queue_oldest_age_seconds", DEFAULT) is None
    _wait_all(platform, "database probe 1", lambda s: s.get("jobs_database_up") == 1.0)

    # when the web stops
    assert platform.web is not None
    platform.web.stop(sig=signal.SIGKILL, timeout=5)
    # then the scheduler alone still serves the queue depth and the oldest job's age, growing
    first = scrape(platform.scheduler_metrics_url).get("jobs_queue_oldest_age_seconds", DEFAULT)
    assert first is not None
    assert first > 0

    def grown() -> Samples | None:
        samples = scrape(platform.scheduler_metrics_url)
        age = samples.get("jobs_queue_oldest_age_seconds", DEFAULT) or 0
        return samples if age > first else None

    later = wait_for(grown, timeout=15, interval=0.25, what="the oldest job's age to grow")
    assert later.get("jobs_queue_depth", SCHEDULED) == 0.0
