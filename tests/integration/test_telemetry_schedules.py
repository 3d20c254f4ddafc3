"""The periodic schedules' series on a live scheduler's /metrics (issue 23, item 3).

A schedule declared in code ticking every 2 s: the leader counts the ticks it
created (`jobs_schedule_ticks_total{outcome="created"}`), observes each one's
lag (`jobs_schedule_lag_seconds`), and every scrape reads how overdue the
schedule is (`jobs_schedule_overdue_seconds`, 0 while it keeps up).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from devstack.services import wait_for
from tests.integration.harness import Platform
from tests.integration.periodic import schedules_env
from tests.integration.telemetry import covers, scrape

SCHEDULE = {"schedule": "every-2s"}


@covers("jobs_schedule_ticks_total", "jobs_schedule_lag_seconds", "jobs_schedule_overdue_seconds")
@pytest.mark.timeout(120)
def test_telemetry_schedules_count_ticks_observe_lag_and_read_overdue(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a scheduler leading with one schedule every 2 s
    env = schedules_env({"every-2s": {"kind": "demo.flaky", "every": 2, "payload": {}}})
    platform = platform_factory("schedule_series", web=False, env=env)

    # when it has created two ticks' jobs
    def created() -> float:
        samples = scrape(platform.scheduler_metrics_url)
        return samples.get("jobs_schedule_ticks_total", {**SCHEDULE, "outcome": "created"}) or 0

    wait_for(lambda: created() >= 2, timeout=30, what="two ticks created")

    # then each tick's lag was observed, and the schedule is not overdue
    samples = scrape(platform.scheduler_metrics_url)
    lag_count = samples.get("jobs_schedule_lag_seconds_count", SCHEDULE)
    lag_sum = samples.get("jobs_schedule_lag_seconds_sum", SCHEDULE)
    assert lag_count is not None
    assert lag_count >= 2
    assert lag_sum is not None
    assert lag_sum / lag_count < 2
    assert samples.get("jobs_schedule_overdue_seconds", SCHEDULE) == 0
