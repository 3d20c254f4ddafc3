"""Clock faults: a worker whose host clock is an hour off judges no lease or due time by it.

DESIGN.md ("Faults"): leases and due times are judged by one clock, the
database's, never by a host's. The worker's wall clock is an hour ahead or
behind (tests/integration/skewed_clock/sitecustomize.py shifts time.time()
and django.utils.timezone.now() in that process and its children); its
monotonic clock is left alone, as a real skewed host's would be. Web, scheduler and PostgreSQL keep the true time.

Before jobs.clock, a worker an hour ahead set due times an hour late (a job
retrying after 0.2-2 s waited an hour), and a worker an hour behind set
leases that had already expired, so the scheduler's lease sweep recorded a
running attempt as `worker_lost` and the job ran a second time.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack.processes import Process
from tests.integration.harness import FLAKY_POLICY, Platform, PlatformFactory, require_postgres

pytestmark = pytest.mark.integration

SHIM = Path(__file__).with_name("skewed_clock")
HOUR = 3600


@pytest.fixture(scope="module")
def clock_platform(_logroot: Path) -> Iterator[Platform]:
    """Web and scheduler on the true clock; workers are started per test, skewed."""
    require_postgres()
    factory = PlatformFactory(logroot=_logroot)
    try:
        yield factory(
            "clock",
            env={"JOBS_KIND_OVERRIDES": json.dumps({"demo.flaky": FLAKY_POLICY})},
            worker=False,
        )
    finally:
        factory.close()


def _skewed_worker(platform: Platform, seconds: int) -> Iterator[Process]:
    path = os.pathsep.join(p for p in (str(SHIM), os.environ.get("PYTHONPATH", "")) if p)
    env = {"PYTHONPATH": path, "JOBS_TEST_CLOCK_SKEW": str(seconds)}
    worker = platform.stack.start_worker(
        concurrency=2, timeout=120, log_name=f"worker-skew{seconds:+d}", env=env
    )
    try:
        yield worker
    finally:
        worker.stop()


def test_worker_an_hour_ahead_retries_within_seconds(clock_platform: Platform) -> None:
    for _worker in _skewed_worker(clock_platform, +HOUR):
        # when a job fails twice on a worker whose clock is an hour ahead
        job = clock_platform.wait_job(
            clock_platform.submit("demo.flaky", {"fail_times": 2}), timeout=60
        )
        # then its retries came within the backoff's seconds, by the database's clock
        assert job["status"] == "succeeded", job
        assert job["attempts_made"] == 3, job
        gaps = clock_platform.rows(
            "SELECT extract(epoch FROM b.started_at - a.finished_at) FROM jobs_attempt a "
            "JOIN jobs_attempt b ON b.job_id = a.job_id AND b.number = a.number + 1 "
            "WHERE a.job_id = %s ORDER BY a.number",
            (job["id"],),
        )
        assert len(gaps) == 2, gaps
        assert all(0 <= float(g) < 30 for (g,) in gaps), gaps
        # and every time the worker wrote is the database's, not an hour ahead
        skew = clock_platform.scalar(
            "SELECT max(abs(extract(epoch FROM greatest(started_at, finished_at) - now()))) "
            "FROM jobs_attempt WHERE job_id = %s",
            (job["id"],),
        )
        assert float(skew) < 120, skew


def test_worker_an_hour_behind_keeps_its_lease(clock_platform: Platform) -> None:
    for _worker in _skewed_worker(clock_platform, -HOUR):
        # when an 8 s attempt runs on a worker whose clock is an hour behind,
        # while the scheduler sweeps expired leases every pass
        job_id = clock_platform.submit("demo.sleep", {"seconds": 8, "step_seconds": 0.1})
        clock_platform.wait_job(job_id, statuses=frozenset({"running"}), timeout=60)
        lease_left = clock_platform.scalar(
            "SELECT extract(epoch FROM lease_expires_at - now()) FROM jobs_job WHERE id = %s",
            (job_id,),
        )
        job = clock_platform.wait_job(job_id, timeout=90)
        # then its lease ran from the database's now (hard limit + grace ahead), and the
        # attempt was never taken for a lost one: one attempt, succeeded
        assert 0 < float(lease_left) <= 45 + 30, lease_left
        assert job["status"] == "succeeded", job
        assert [a["outcome"] for a in job["attempts"]] == ["succeeded"], job
