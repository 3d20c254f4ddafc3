"""A broker outage at submit time loses nothing.

Issue 2, Acceptance: "the test stops its own redis-server, POSTs a job (202),
restarts Redis: the sweep publishes the job and it succeeds".
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from devstack.services import wait_for
from tests.integration.harness import Platform


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_submit_during_redis_outage_is_published_by_sweep_after_restart(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a platform on its own redis-server whose sweep republishes rows
    # unpublished for 1 s, and a worker that has already run a job through it
    platform = platform_factory("broker_outage", env={"JOBS_SWEEP_UNPUBLISHED_AFTER": "1"})
    before = platform.wait_job(platform.submit("demo.flaky", {"fail_times": 0}), timeout=60)
    assert before["status"] == "succeeded", before

    # when Redis stops and two jobs are submitted (the first POST finds a pooled
    # connection broken, the second has to connect afresh)
    platform.redis.stop()
    job_ids = []
    for _ in range(2):
        started = time.monotonic()
        response = platform.post_job({"kind": "demo.flaky", "payload": {"fail_times": 0}})
        elapsed = time.monotonic() - started

        # then the API accepts each (the row is durable) without a 5xx
        assert response.status_code == 202, (
            f"{response.status_code} after {elapsed:.1f}s: {response.text}"
        )
        # and promptly: a publish to a dead broker fails fast (one try), it
        # does not hold the request in kombu's retry loop (~6 s each before)
        assert elapsed < 2.0, f"POST took {elapsed:.2f}s while Redis was down"
        job_ids.append(response.json()["id"])
    for job_id in job_ids:
        job = platform.job(job_id)
        assert job["status"] == "queued", job
        assert job["published_at"] is None, job
    # and the scheduler's sweep tries to publish them, fails, and keeps running
    scheduler = platform.scheduler
    assert scheduler is not None
    wait_for(
        lambda: f"publish failed job_id={job_ids[0]}" in scheduler.log(),
        timeout=60,
        interval=0.1,
        what="the sweep's failed publish while Redis is down",
    )
    assert scheduler.alive(), scheduler.log()[-3000:]

    # when Redis comes back on the same port
    platform.redis.start()

    # then the sweep publishes the jobs and the worker, reconnected, runs them to success
    for job_id in job_ids:
        job = platform.wait_job(job_id, timeout=120)
        assert job["status"] == "succeeded", job
        assert job["published_at"] is not None
        assert [a["outcome"] for a in job["attempts"]] == ["succeeded"]
