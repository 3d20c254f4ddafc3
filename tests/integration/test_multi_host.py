"""Issue 21's multi-host drills: worker, web and scheduler hosts in network namespaces, each
with an address of its own, on both brokers (Redis; RabbitMQ quorum queues), state in PostgreSQL.

One cluster per broker (module fixture, tests/integration/multi_host.py): 3 worker hosts (w1's
clock 90 s ahead, w2's 90 s behind, w3's true) and 2 hosts each running a web and a scheduler.
The drills run in this file's order on it; each first restarts any worker host a previous
drill left down. Time limits are short (hard 6 s, lease grace 4 s: a 10 s lease) so a lost
worker's attempts are judged in seconds. Each drill prints its figures.
"""

from __future__ import annotations

import json
import random
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.services import wait_for
from tests.integration.harness import PlatformFactory, require_postgres
from tests.integration.multi_host import (
    Cluster,
    admin_overview,
    build_cluster,
    kill_host,
    overlap_and_after_success,
)

pytestmark = [pytest.mark.integration, pytest.mark.drill]

HARD, SOFT, GRACE = 6.0, 4.0, 4.0
LEASE = HARD + GRACE
SKEW = 90
FLAKY = {"max_attempts": 5, "backoff_base": 0.5, "backoff_floor": 0.2, "backoff_cap": 2.0}
LIMITS = {"soft_time_limit": SOFT, "hard_time_limit": HARD}
ENV = {
    "JOBS_STATE_STORE": "postgres",
    "JOBS_LEASE_GRACE": str(GRACE),
    "JOBS_KIND_OVERRIDES": json.dumps(
        {
            "demo.flaky": {**FLAKY, **LIMITS},
            "demo.sleep": LIMITS,
            "demo.crash": {"max_attempts": 2, **LIMITS},
        }
    ),
    "JOBS_QUEUE_MAX_READY": str(10**6),
    "JOBS_LOST_MESSAGE_CHECK_INTERVAL": "2",
    "JOBS_LOST_MESSAGE_MARGIN": "1",
}
BROKERS = ["redis", pytest.param("rabbitmq", marks=pytest.mark.rabbitmq)]


@pytest.fixture(scope="module", params=BROKERS)
def cluster(request: pytest.FixtureRequest, _logroot: Path) -> Iterator[Cluster]:
    require_postgres()
    factory = PlatformFactory(logroot=_logroot)
    try:
        started = time.monotonic()
        built = build_cluster(factory, str(request.param), env=ENV, worker_skews=(SKEW, -SKEW, 0))
        print(f"\n{request.param}: cluster of 5 hosts up in {time.monotonic() - started:.1f} s")
        yield built
    finally:
        factory.close()


def _forget_jobs(cluster: Cluster) -> None:
    """Each drill counts its own jobs: earlier drills' rows are removed first."""
    cluster.platform.rows("DELETE FROM jobs_job RETURNING 1") if cluster.platform.scalar(
        "SELECT count(*) FROM jobs_job"
    ) else None


def _running_on(cluster: Cluster, job_id: str, timeout: float = 60) -> str:
    row: list[Any] = []

    def running() -> bool:
        row[:] = cluster.platform.rows(
            "SELECT worker_hostname FROM jobs_attempt WHERE job_id = %s AND finished_at IS NULL",
            (job_id,),
        )
        return bool(row)

    wait_for(running, timeout=timeout, interval=0.05, what=f"job {job_id} running")
    return str(row[0][0])


@pytest.mark.timeout(300)
def test_cancel_from_one_web_host_ends_an_attempt_on_another_worker_host(
    cluster: Cluster,
) -> None:
    cluster.heal()
    web_a, web_b = cluster.clients
    latencies: dict[str, float] = {}
    # when a long attempt runs on each worker host and another web host cancels it
    for _ in range(12):
        if len(latencies) == len(cluster.workers):
            break
        job_id = web_a.submit("demo.sleep", {"seconds": 60, "step_seconds": 0.05})
        node = _running_on(cluster, job_id)
        sent = time.monotonic()
        response = web_b.session.post(web_b.url(f"/api/jobs/{job_id}/cancel/"), timeout=30)
        assert response.status_code == 200, response.text

        def ended(job_id: str = job_id) -> bool:
            return bool(
                cluster.platform.scalar(
                    "SELECT count(*) = 0 FROM jobs_attempt WHERE job_id = %s"
                    " AND finished_at IS NULL",
                    (job_id,),
                )
            )

        wait_for(ended, timeout=30, interval=0.02, what="cancelled attempt ended")
        latencies.setdefault(node, time.monotonic() - sent)
        job = web_a.wait_job(job_id, timeout=30)
        assert job["status"] == "cancelled", job
    print(
        f"{cluster.broker}: cancel -> attempt ended (s) per worker host: "
        + ", ".join(f"{n} {s:.2f}" for n, s in sorted(latencies.items()))
        + f"; max {max(latencies.values()):.2f}"
    )
    # then it ended within 2 s on every worker host
    assert len(latencies) == len(cluster.workers), latencies
    assert max(latencies.values()) < 2.0, latencies
