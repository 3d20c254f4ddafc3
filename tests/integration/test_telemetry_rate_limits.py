"""Rate limits (issue 24 item 1) on one host with real worker processes: starts of a kind
with `rate="20/s"` never exceed rate + burst in any sliding second, the mean is within 10% of
the rate, nothing is lost, and the wait is visible (the job's waiting reason,
jobs_rate_waiting and jobs_rate_limit_per_second on the web's /metrics).

Real PostgreSQL, Redis, gunicorn, the scheduler (tick 0.1 s, harness.BASE_ENV; its pacer
publishes held jobs at their reserved starts) and 2 workers of 4 children each. About 26 s:
in the slow tier.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from devstack.services import wait_for
from tests.integration.harness import Platform
from tests.integration.rate_sampling import (
    mean_rate,
    start_times,
    submit_paced,
    summary,
    worst_window,
)
from tests.integration.telemetry import covers, scrape

KIND = "demo.sleep"
RATE = 20
BURST = 2
JOBS = 300


def _shown_waiting(platform: Platform, *, deadline: float) -> dict[str, Any]:
    """The API's `waiting` of the newest job held for the rate (polled: a held job may start
    between the read of its id and the API's answer)."""
    while time.monotonic() < deadline:
        held = platform.scalar(
            "SELECT id::text FROM jobs_job WHERE waiting_reason = 'rate_limit'"
            " ORDER BY enqueued_at DESC LIMIT 1"
        )
        shown = platform.job(held)["waiting"] if held is not None else None
        if shown and shown["reason"] == "rate_limit":
            return dict(shown)
        time.sleep(0.05)  # polling the API with a deadline
    raise AssertionError("no job shown waiting for the rate")


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(240)
@covers("jobs_rate_waiting", "jobs_rate_limit_per_second")
def test_rate_limit_holds_across_workers(platform_factory: Callable[..., Platform]) -> None:
    # given demo.sleep at 20/s with a burst of 2, and 2 workers of 4 children each
    overrides = {KIND: {"rate": f"{RATE}/s", "rate_burst": BURST}}
    platform = platform_factory(
        "ratelim", env={"JOBS_KIND_OVERRIDES": json.dumps(overrides)}, worker=False
    )
    for n in range(2):
        platform.stack.start_worker(concurrency=4, timeout=120, log_name=f"worker{n}")
    web = platform.url("/metrics")
    assert scrape(web).get("jobs_rate_limit_per_second", {"kind": KIND}) == RATE

    # when 300 short jobs (15 s at the rate) are submitted a quarter faster than the rate
    began = time.time()
    ids = submit_paced(platform, KIND, {"seconds": 0.01}, count=JOBS, per_second=1.25 * RATE)

    # then the wait is visible while they drain: the reason on a held job and the gauge
    shown = _shown_waiting(platform, deadline=time.monotonic() + 20)
    waiting = scrape(web).get("jobs_rate_waiting", {"kind": KIND})
    try:
        wait_for(
            lambda: platform.job_count(status="succeeded") == JOBS,
            timeout=60,
            interval=0.2,
            what=f"{JOBS} succeeded",
        )
    except TimeoutError as exc:
        rows = platform.rows("SELECT status, waiting_reason, count(*) FROM jobs_job GROUP BY 1, 2")
        rows += platform.rows(
            "SELECT enqueued_at, next_attempt_at, publish_claimed_by, publish_claimed_until,"
            " published_at, deliveries, attempts_made, now() FROM jobs_job"
            " WHERE waiting_reason = 'rate_limit' ORDER BY enqueued_at LIMIT 4"
        )
        rows += platform.rows("SELECT * FROM jobs_ratebucket")
        oldest = platform.scalar(
            "SELECT id::text FROM jobs_job WHERE waiting_reason = 'rate_limit'"
            " ORDER BY enqueued_at LIMIT 1"
        )
        logs = "\n".join(
            line
            for p in platform.stack.processes
            for line in p.log().splitlines()
            if oldest in line
        )
        raise AssertionError(f"{exc}: {rows}\n{logs[-6000:]}") from None
        raise AssertionError(f"{exc}: {rows}\n{platform.log_tails()}") from None
    took = time.time() - began

    # and no sliding second held more than rate + burst starts, at the rate on average
    times = start_times(platform, KIND)
    holds = platform.scalar("SELECT coalesce(sum(deliveries - 1), 0) FROM jobs_job")
    print(
        f"rate={RATE}/s burst={BURST}: {JOBS} jobs in {took:.1f} s; {summary(times, burst=BURST)};"
        f" {holds} deliveries held; waiting gauge {waiting} mid-run; shown {shown}"
    )
    assert shown["reason"] == "rate_limit", shown
    assert shown["detail"].startswith(f"waiting for rate limit `{KIND}`: {RATE}/s")
    assert shown["until"] is not None
    assert waiting is not None
    assert waiting > 0
    assert len(times) == JOBS == len(set(ids))
    assert worst_window(times) <= RATE + BURST
    assert mean_rate(times, burst=BURST) == pytest.approx(RATE, rel=0.1)
    assert platform.scalar("SELECT count(*) FROM jobs_attempt") == JOBS
