"""Catalogue entries read at scrape time or live: in flight, worker pool, queues.

Issue 4, Acceptance: "Each catalogue entry is exercised by a test that reads
it with `get_sample_value` and sees it move when, and only when, it should."
The exact 30 / 20 / 10 queue-depth case is test_telemetry_queue_depth.py.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from devstack.services import wait_for
from tests.integration.harness import Platform
from tests.integration.telemetry import (
    FLAKY,
    HOST,
    MAX_MEMORY_BYTES,
    catalogue_platform,
    covers,
    quiet,
    scrape,
    wait_metric,
)


@pytest.fixture(scope="module")
def plat(_logroot: Path) -> Iterator[Platform]:
    """This module's platform (telemetry.catalogue_platform)."""
    yield from catalogue_platform(_logroot, "telemetry_gauges")


# --- gauges -------------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.timeout(120)
@covers("jobs_attempts_in_flight", "celery_worker_tasks_active")
def test_in_flight_and_active_follow_a_running_attempt(plat: Platform) -> None:
    # given a quiet platform: nothing in flight
    before = quiet(plat)
    assert before.total("jobs_attempts_in_flight") == 0
    assert before.get("celery_worker_tasks_active", {"hostname": HOST}) == 0

    # when a 6 s attempt runs
    job_id = plat.submit("demo.flaky", {"fail_times": 0, "sleep_seconds": 6})

    # then both read 1 while it runs (tasks_active from the worker's next heartbeat, 2 s)
    during = wait_metric(
        plat,
        lambda s: (
            s.get("jobs_attempts_in_flight", FLAKY) == 1
            and s.get("celery_worker_tasks_active", {"hostname": HOST}) == 1
        ),
        timeout=30,
        what="one attempt in flight and active",
    )
    assert during.total("jobs_attempts_in_flight") == 1
    assert plat.job(job_id)["status"] == "running"

    # and both are back to 0 once it ended
    assert plat.wait_job(job_id)["status"] == "succeeded"
    after = wait_metric(
        plat,
        lambda s: s.get("celery_worker_tasks_active", {"hostname": HOST}) == 0,
        timeout=30,
        what="no task active",
    )
    assert after.total("jobs_attempts_in_flight") == 0


def _close(measured: float, true: float, tolerance: float) -> bool:
    return abs(measured - true) <= tolerance * true


@pytest.mark.integration
@pytest.mark.timeout(120)
@covers(
    "celery_worker_up",
    "jobs_worker_child_rss_bytes",
    "jobs_worker_child_threads",
    "jobs_worker_main_rss_bytes",
    "jobs_worker_max_memory_per_child_bytes",
)
def test_worker_pool_gauges_match_the_process_table(plat: Platform) -> None:
    # given the platform's worker (main process + 2 children)
    worker = plat.worker
    assert worker is not None
    quiet(plat)

    # when its /metrics is scraped
    samples = scrape(plat.worker_metrics_url)
    children = {c.pid: c for c in worker.children()}

    # then it is up (the scheduler's view, from its heartbeats), reports its configured
    # limit, and one RSS and thread reading per live child, no more, each close to what
    # the process table says
    assert scrape(plat.scheduler_metrics_url).get("celery_worker_up", {"hostname": HOST}) == 1
    assert "celery_worker_up" not in samples.names()  # a dead worker could not say it is down
    assert samples.get("jobs_worker_max_memory_per_child_bytes", {"hostname": HOST}) == (
        MAX_MEMORY_BYTES
    )
    rss = {dict(k)["pid"]: v for k, v in samples.series("jobs_worker_child_rss_bytes").items()}
    threads = {dict(k)["pid"]: v for k, v in samples.series("jobs_worker_child_threads").items()}
    assert set(rss) == set(threads) == {str(pid) for pid in children}
    for pid, child in children.items():
        assert _close(rss[str(pid)], child.memory_info().rss, 0.2), (pid, rss)
        assert threads[str(pid)] == child.num_threads(), (pid, threads)
    main_rss = psutil.Process(worker.pid).memory_info().rss
    assert _close(samples.get("jobs_worker_main_rss_bytes", {"hostname": HOST}), main_rss, 0.2)

    # when one idle child is killed and replaced
    victim = min(children)
    worker_children = lambda: {c.pid for c in worker.children()}  # noqa: E731
    psutil.Process(victim).send_signal(signal.SIGKILL)
    wait_for(
        lambda: victim not in worker_children() and len(worker_children()) == 2,
        timeout=30,
        what="killed child replaced",
    )

    # then the next scrape names the new child instead
    samples = scrape(plat.worker_metrics_url)
    pids = {dict(k)["pid"] for k in samples.series("jobs_worker_child_rss_bytes")}
    assert pids == {str(p) for p in worker_children()}
    assert str(victim) not in pids
    assert scrape(plat.scheduler_metrics_url).get("celery_worker_up", {"hostname": HOST}) == 1


@pytest.mark.integration
@pytest.mark.timeout(120)
@covers("jobs_queue_depth", "celery_queue_length", "jobs_queue_oldest_age_seconds")
def test_queue_gauges_follow_queued_jobs(platform_factory: Callable[..., Platform]) -> None:
    # given a platform with no worker (published jobs stay ready) whose sweep republishes
    # rows left unpublished for 1 s
    platform = platform_factory(
        "queue_gauges", worker=False, env={"JOBS_SWEEP_UNPUBLISHED_AFTER": "1"}
    )
    web = platform.url("/metrics")
    empty = scrape(web)
    for state in ("ready", "reserved", "scheduled", "unpublished"):
        assert empty.get("jobs_queue_depth", {"queue": "default", "state": state}) == 0
    assert empty.get("celery_queue_length", {"queue_name": "default"}) == 0
    assert empty.get("jobs_queue_oldest_age_seconds", {"queue": "default"}) == 0

    # when three jobs are submitted
    submitted_at = time.time()
    for _ in range(3):
        platform.submit("demo.flaky", {"fail_times": 0})
    first = scrape(web)

    # then three are ready (and counted by celery_queue_length), and the oldest has an age
    assert first.get("jobs_queue_depth", {"queue": "default", "state": "ready"}) == 3
    assert first.get("celery_queue_length", {"queue_name": "default"}) == 3
    age = first.get("jobs_queue_oldest_age_seconds", {"queue": "default"})
    assert 0 < age <= time.time() - submitted_at + 1, age

    # and the age grows while they wait
    later = wait_metric(
        platform,
        lambda s: s.get("jobs_queue_oldest_age_seconds", {"queue": "default"}) >= age + 1,
        timeout=10,
        what="oldest age to grow by 1 s",
        url=web,
    )
    assert later.get("jobs_queue_depth", {"queue": "default", "state": "ready"}) == 3

    # when the broker is down and one more job is submitted (its publish fails)
    platform.redis.stop()
    assert (
        platform.post_job({"kind": "demo.flaky", "payload": {"fail_times": 0}}).status_code == 202
    )

    # then it shows as unpublished, and the broker's parts, which cannot be read, are
    # left out (issue 19: not reported as 0)
    outage = scrape(web)
    assert outage.get("jobs_queue_depth", {"queue": "default", "state": "unpublished"}) == 1
    assert outage.get("jobs_queue_depth", {"queue": "default", "state": "ready"}) is None
    assert outage.get("celery_queue_length", {"queue_name": "default"}) is None

    # when the broker is back (empty: it keeps nothing on disk)
    platform.redis.start()

    # then the scheduler publishes all four again: four ready, none unpublished
    wait_metric(
        platform,
        lambda s: (
            s.get("jobs_queue_depth", {"queue": "default", "state": "ready"}) == 4
            and s.get("jobs_queue_depth", {"queue": "default", "state": "unpublished"}) == 0
        ),
        timeout=30,
        what="4 ready, 0 unpublished",
        url=web,
    )

    # when a worker consumes them
    platform.stack.start_worker(concurrency=2)
    wait_for(
        lambda: platform.job_count(status="succeeded") == 4, timeout=60, what="4 jobs succeeded"
    )

    # then the queue reads empty again
    drained = scrape(web)
    for state in ("ready", "reserved", "scheduled", "unpublished"):
        assert drained.get("jobs_queue_depth", {"queue": "default", "state": state}) == 0
    assert drained.get("celery_queue_length", {"queue_name": "default"}) == 0
    assert drained.get("jobs_queue_oldest_age_seconds", {"queue": "default"}) == 0
