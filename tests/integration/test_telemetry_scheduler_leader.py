"""jobs_scheduler_leader on each scheduler's /metrics: 1 on the leader, 0 on a standby.

Issue 21, item 3: "`jobs_scheduler_leader` per instance". A leader stopped
with SIGTERM releases its lease, so the standby's gauge reads 1 within a
renewal (JOBS_SCHEDULER_RENEW_SECONDS, 2 s) and a scrape.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from devstack.services import wait_for
from tests.integration.harness import Platform
from tests.integration.scheduler_replicas import leader_gauge, leader_pid, start_scheduler
from tests.integration.telemetry import covers


@covers("jobs_scheduler_leader")
@pytest.mark.timeout(180)
def test_telemetry_scheduler_leader_is_1_on_the_leader_and_0_on_a_standby(
    platform_factory: Callable[..., Platform],
) -> None:
    # given two schedulers, the first one leading
    platform = platform_factory("leader_gauge", web=False, worker=False)
    assert platform.scheduler is not None
    first = platform.scheduler
    standby, standby_metrics = start_scheduler(platform, "scheduler-standby")
    wait_for(lambda: leader_pid(platform) == first.pid, timeout=20, what="first scheduler leads")

    # then the leader's gauge reads 1 and the standby's 0
    wait_for(
        lambda: (
            (leader_gauge(platform.scheduler_metrics_url), leader_gauge(standby_metrics))
            == (1.0, 0.0)
        ),
        timeout=10,
        what="gauges: leader 1, standby 0",
    )

    # when the leader stops (SIGTERM: it releases the lease)
    first.stop(timeout=20)
    stopped_at = time.monotonic()

    # then the standby leads within a renewal, and says so
    wait_for(lambda: leader_gauge(standby_metrics) == 1.0, timeout=10, what="standby gauge 1")
    assert leader_pid(platform) == standby.pid
    assert time.monotonic() - stopped_at < 5
    assert "released the lease" in first.log()
