"""observability.probes: jobs_broker_up and jobs_database_up read what a new connection finds.

A database that does not answer is drilled with real servers:
tests/integration/test_telemetry_probes.py and test_outage_matrix.py.
"""

from __future__ import annotations

import socket
import time

import pytest
from celery import Celery
from prometheus_client import CollectorRegistry

from devstack.services import RedisServer, free_port
from observability.probes import DependencyCollector, broker_reachable


def _app(broker_url: str) -> Celery:
    return Celery("probe-test", broker=broker_url, set_as_current=False)


def _samples(collector: DependencyCollector) -> dict[str, float | None]:
    registry = CollectorRegistry()
    registry.register(collector)
    return {
        name: registry.get_sample_value(name) for name in ("jobs_broker_up", "jobs_database_up")
    }


@pytest.mark.django_db
def test_both_read_1_when_the_broker_and_the_database_answer(private_broker: RedisServer) -> None:
    collector = DependencyCollector(_app(private_broker.url), timeout=1.0)
    assert _samples(collector) == {"jobs_broker_up": 1.0, "jobs_database_up": 1.0}


@pytest.mark.django_db
def test_broker_reads_0_quickly_when_nothing_listens_on_its_port() -> None:
    # given a broker URL whose port nobody listens on
    app = _app(f"redis://127.0.0.1:{free_port()}/0")
    # when it is probed
    started = time.monotonic()
    samples = _samples(DependencyCollector(app, timeout=1.0))
    # then it reads 0 (not absent), without retrying, and the database still reads 1
    assert samples == {"jobs_broker_up": 0.0, "jobs_database_up": 1.0}
    assert time.monotonic() - started < 1.0


def test_broker_probe_is_bounded_by_its_timeout_when_the_broker_never_answers() -> None:
    # given a listening socket that accepts connections and never answers (a frozen Redis)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        app = _app(f"redis://127.0.0.1:{port}/0")
        # when it is probed with a 0.5 s timeout
        started = time.monotonic()
        reachable = broker_reachable(app, timeout=0.5)
        elapsed = time.monotonic() - started
    # then it is unreachable, found within the timeout and a margin, not Redis's 5 s
    assert reachable is False
    assert elapsed < 2.0, elapsed
