"""A child whose attempt was interrupted is replaced after it; time limits are visible by child.

Issue 19, item 1, defence in depth: a child whose attempt had to be ended
by an exception raised into its code (the supervisor's abort after a soft
limit or a cancellation the code ignored; Celery's soft time limit) is
replaced right after that attempt (jobs.child_retire), counted as
jobs_worker_children_recycled_total{reason="aborted"}; a kind that times
out on one child while it succeeds on the others shows in
jobs_worker_child_attempts_total{child} and in a log line naming the
child. What must stay silent: successes, retried errors and a cancellation
the code honoured replace no child.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest

from devstack.services import wait_for
from tests.integration.harness import Platform
from tests.integration.telemetry import covers, scrape
from tests.integration.test_failure_semantics import live_children

SLEEP = {"max_attempts": 1, "soft_time_limit": 1, "hard_time_limit": 8}


def retire_platform(
    factory: Callable[..., Platform], name: str, *, overrides: dict | None = None
) -> Platform:
    # No per-child memory limit: the retirement must not depend on one (jobs.child_retire).
    return factory(
        name,
        env={
            "JOBS_KIND_OVERRIDES": json.dumps(overrides or {}),
            "JOBS_WORKER_MAX_MEMORY_PER_CHILD_BYTES": "0",
        },
        worker_concurrency=2,
    )


def recycled(platform: Platform, reason: str) -> float:
    return scrape(platform.worker_metrics_url).total(
        "jobs_worker_children_recycled_total", reason=reason
    )


@pytest.mark.integration
@pytest.mark.timeout(300)
@covers("jobs_worker_children_recycled_total", "jobs_worker_child_attempts_total")
def test_child_interrupted_mid_attempt_is_replaced_and_named(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a worker of 2 children with no memory limit
    platform = retire_platform(platform_factory, "child_retire", overrides={"demo.sleep": SLEEP})
    worker = platform.worker
    assert worker is not None
    before = live_children(platform)

    # when an attempt swallows its soft time limit (1 s) and is aborted a
    # second later, while the other child runs short attempts of the same kind
    slow = platform.submit("demo.sleep", {"seconds": 6, "step_seconds": 0.1, "mode": "swallow"})
    wait_for(
        lambda: platform.job(slow)["status"] == "running", timeout=60, interval=0.05, what="run"
    )
    quick = [platform.submit("demo.sleep", {"seconds": 0.05}) for _ in range(5)]
    job = platform.wait_job(slow, timeout=60)
    for job_id in quick:
        assert platform.wait_job(job_id, timeout=60)["status"] == "succeeded"

    # then the attempt ended soft_timeout and its child was replaced after it
    [attempt] = job["attempts"]
    assert attempt["outcome"] == "soft_timeout", job
    pid = attempt["worker_pid"]
    assert pid in before, (pid, before)
    wait_for(lambda: pid not in live_children(platform), timeout=30, what=f"child {pid} gone")
    wait_for(lambda: len(live_children(platform)) == 2, timeout=30, what="2 children again")
    wait_for(lambda: recycled(platform, "aborted") == 1, timeout=30, what="aborted recycle")
    assert recycled(platform, "hard_time_limit") == 0

    # and the log names the child, with its record for the kind
    log = worker.log()
    named = re.search(rf"time limit in worker child pid {pid} \(index (\d)", log)
    assert named, log[-3000:]
    assert f"worker child pid {pid} (index {named.group(1)}) is replaced after this attempt" in log
    # and the metric by child shows the time limit on that child's place,
    # the same kind's successes on the other's
    series = scrape(platform.worker_metrics_url).series("jobs_worker_child_attempts_total")
    sleep = {
        (dict(k)["child"], dict(k)["outcome"]): v
        for k, v in series.items()
        if dict(k)["kind"] == "demo.sleep" and v
    }
    index = named.group(1)
    other = "1" if index == "0" else "0"
    print(f"child retire: pid {pid} (index {index}) replaced; by child {sleep}")
    assert sleep.get((index, "soft_timeout")) == 1, sleep
    assert sleep.get((other, "succeeded"), 0) >= 1, sleep
    assert (other, "soft_timeout") not in sleep, sleep


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_no_child_replaced_for_successes_errors_or_an_honoured_cancel(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a worker of 2 children (demo.sleep's soft limit is 30 s)
    platform = retire_platform(platform_factory, "child_keep")
    before = live_children(platform)

    # when attempts succeed, fail and are retried, and one attempt stops on
    # its cancellation flag (a cancel through the API)
    done = [platform.submit("demo.flaky", {"fail_times": 1}) for _ in range(4)]
    done += [platform.submit("demo.sleep", {"seconds": 0.05}) for _ in range(4)]
    long = platform.submit("demo.sleep", {"seconds": 30, "step_seconds": 0.1})
    wait_for(
        lambda: platform.job(long)["status"] == "running", timeout=60, interval=0.05, what="run"
    )
    response = platform.session.post(platform.url(f"/api/jobs/{long}/cancel/"), timeout=30)
    assert response.status_code in (200, 202), response.text
    cancelled = platform.wait_job(long, timeout=60)
    finished = [platform.wait_job(job_id, timeout=120) for job_id in done]

    # then nothing was replaced: the same two children, no aborted recycle
    assert cancelled["status"] == "cancelled", cancelled
    assert {j["status"] for j in finished} == {"succeeded"}
    assert live_children(platform) == before
    assert recycled(platform, "aborted") == 0
    assert platform.worker is not None
    assert "is replaced after this attempt" not in platform.worker.log()
