"""A child SIGKILLed mid-attempt leaves no stale series behind.

Issue 4, Acceptance: "SIGKILL a child mid-attempt: the in-flight gauge is back
to the true value at the next scrape and no series names the dead pid."

The in-flight gauge is `livesum` over the children's multiprocess files: the
killed child's file still says 1 (it never ran its decrement), so only the
scrape-time compaction (observability.multiproc) can make it right.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from devstack.services import wait_for
from tests.integration.harness import Platform
from tests.integration.telemetry import HOST, Samples, covers, scrape, wait_metric

SLEEP = {"kind": "demo.sleep", "queue": "default"}


def _dead(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _pids_named(samples: Samples) -> set[str]:
    return {value for (_, labels) in samples.values for key, value in labels if key == "pid"}


def _worker_dir(platform: Platform) -> Path:
    dirs = list(Path(platform.stack.env["JOBS_METRICS_DIR"]).glob("worker-*"))
    assert len(dirs) == 1, dirs
    return dirs[0]


@pytest.mark.integration
@pytest.mark.timeout(180)
@covers("jobs_attempts_in_flight", "jobs_worker_child_rss_bytes")
def test_sigkilled_child_mid_attempt_leaves_true_in_flight_and_no_dead_pid(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a 2-child worker where a lost attempt is not run again (poison after one
    # loss), so the true number in flight after the kill is known: the other attempt
    platform = platform_factory("sigkill", env={"JOBS_POISON_AFTER": "1"})
    worker = platform.worker
    assert worker is not None
    # and two 10 s attempts running, one per child
    victim_job = platform.submit("demo.sleep", {"seconds": 10})
    other_job = platform.submit("demo.sleep", {"seconds": 10})
    for job_id in (victim_job, other_job):
        platform.wait_job(job_id, statuses=frozenset({"running"}), timeout=30)
    wait_metric(
        platform,
        lambda s: s.get("jobs_attempts_in_flight", SLEEP) == 2,
        timeout=30,
        what="two attempts in flight",
        url=platform.worker_metrics_url,
    )
    victim = platform.job(victim_job)["attempts"][0]["worker_pid"]
    survivor = platform.job(other_job)["attempts"][0]["worker_pid"]
    assert victim != survivor
    assert {victim, survivor} == {c.pid for c in worker.children()}
    assert (_worker_dir(platform) / f"gauge_livesum_{victim}.db").exists()

    # when the victim's child is SIGKILLed mid-attempt
    psutil.Process(victim).send_signal(signal.SIGKILL)
    wait_for(lambda: _dead(victim), timeout=10, what="victim dead")

    # then the very next scrape reads the true value: 1 (the survivor's attempt)
    samples = scrape(platform.worker_metrics_url)
    assert samples.get("jobs_attempts_in_flight", SLEEP) == 1, samples.series(
        "jobs_attempts_in_flight"
    )
    # and no series names the dead pid; the survivor is still there
    assert str(victim) not in _pids_named(samples), _pids_named(samples)
    assert samples.get("jobs_worker_child_rss_bytes", {"hostname": HOST, "pid": str(survivor)})
    # and the dead child's files are gone from the worker's metrics directory
    leftovers = sorted(p.name for p in _worker_dir(platform).glob(f"*_{victim}.db"))
    assert leftovers == [], leftovers

    # and the job was recorded as lost (poison after one loss), not run again
    job = platform.wait_job(victim_job, timeout=30)
    assert (job["status"], job["dead_reason"]) == ("dead", "poison"), job

    # when the survivor's attempt ends, nothing is in flight
    assert platform.wait_job(other_job, timeout=30)["status"] == "succeeded"
    end = wait_metric(
        platform,
        lambda s: s.get("jobs_attempts_in_flight", SLEEP) == 0,
        timeout=10,
        what="nothing in flight",
        url=platform.worker_metrics_url,
    )
    assert str(victim) not in _pids_named(end)
    # and the kill is on the books: one worker lost by SIGKILL
    assert end.get("jobs_workers_lost_total", {"hostname": HOST, "signal": "SIGKILL"}) == 1


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_child_killed_while_creating_its_metrics_file_does_not_break_scrapes(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a worker that has run a job
    platform = platform_factory("empty_metrics_file")
    assert platform.wait_job(platform.submit("demo.flaky", {"fail_times": 0}))["status"] == (
        "succeeded"
    )
    before = scrape(platform.worker_metrics_url)
    # and the empty file a child leaves when it dies between creating its metrics file
    # and sizing it (prometheus-client opens it, then truncates it to 64 KiB), for a pid
    # that no longer exists
    dead_pid = _reaped_pid()
    empty = _worker_dir(platform) / f"counter_{dead_pid}.db"
    empty.touch()

    # when /metrics is scraped
    samples = scrape(platform.worker_metrics_url)  # raises on a 500

    # then it answers with the same totals, and the empty file is cleaned up
    assert samples.total("jobs_completed_total") == before.total("jobs_completed_total") == 1
    assert not empty.exists()
    assert samples.series("jobs_worker_child_threads")


def _reaped_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    process = subprocess.Popen(["true"])
    process.wait()
    assert _dead(process.pid)
    return process.pid
