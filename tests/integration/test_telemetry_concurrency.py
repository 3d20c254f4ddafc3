"""jobs_concurrency_waiting and jobs_concurrency_limit on the web's /metrics, moved by jobs held
for a concurrency slot (issue 24 item 1).

A kind limited to one live attempt (JOBS_KIND_OVERRIDES), one long job running and two more
submitted: both wait in the database, the gauge reads 2, then 0 once all three are done.
About 20 s (the platform's start): in the slow tier.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from devstack.services import wait_for
from tests.integration.harness import Platform
from tests.integration.telemetry import covers, scrape, wait_metric

KIND = {"kind": "demo.flaky"}


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(150)
@covers("jobs_concurrency_waiting", "jobs_concurrency_limit")
def test_concurrency_gauges_follow_waiting_jobs(
    platform_factory: Callable[..., Platform],
) -> None:
    # given demo.flaky limited to one live attempt, on a worker of 2 children
    overrides = {"demo.flaky": {"concurrency": 1}}
    platform = platform_factory("conc_gauges", env={"JOBS_KIND_OVERRIDES": json.dumps(overrides)})
    web = platform.url("/metrics")
    first = scrape(web)
    assert first.get("jobs_concurrency_limit", KIND) == 1
    assert first.get("jobs_concurrency_waiting", KIND) == 0
    assert first.get("jobs_concurrency_limit", {"kind": "demo.sleep"}) is None

    # when one long job runs and two more are submitted
    long = platform.submit("demo.flaky", {"fail_times": 0, "sleep_seconds": 4})
    wait_for(
        lambda: platform.job_count(status="running") == 1,
        timeout=60,
        interval=0.1,
        what="1 running",
    )
    others = [platform.submit("demo.flaky", {"fail_times": 0}) for _ in range(2)]

    # then both wait for the slot, and the gauge says so
    wait_metric(
        platform,
        lambda s: s.get("jobs_concurrency_waiting", KIND) == 2,
        timeout=30,
        what="2 jobs waiting for a concurrency slot",
        url=web,
    )
    shown = platform.job(others[-1])
    assert shown["waiting"]["reason"] == "concurrency_limit", shown
    assert "waiting for concurrency slot `demo.flaky`" in shown["waiting"]["detail"]

    # and once all three are done it reads 0
    for job_id in [long, *others]:
        assert platform.wait_job(job_id, timeout=60)["status"] == "succeeded"
    assert scrape(web).get("jobs_concurrency_waiting", KIND) == 0
