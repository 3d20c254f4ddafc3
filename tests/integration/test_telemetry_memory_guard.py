"""The memory guard stops one attempt, not the host; limits a fresh child would break are refused.

Issue 11, item 2, Acceptance: "an attempt that allocates 2 GiB with a hard
memory limit of 300 MB ends `memory_limit` while a job on the neighbouring
child succeeds and the main process survives" and "A worker started with a
per-child limit below what its main process already holds refuses to
start, with one readable line saying why." (The leak and heavy-main runs
are in test_memory_guard_soak.py, marked soak.) Named test_telemetry_*
because it also covers the guard's series of the metric catalogue.

One platform for the module: a 2-child worker whose `demo.allocate` kind
has a hard memory limit of 300 MB and
a soft one of 150 MB: the 2 GiB attempt ignores its cancellation flag, so
the hard path runs; a 250 MB attempt that heeds it stops at the soft one.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from devstack.services import wait_for
from tests.integration.harness import Platform, PlatformFactory, require_postgres
from tests.integration.telemetry import covers, scrape

pytestmark = pytest.mark.integration

MB = 1000 * 1000
MIB = 1024 * 1024
HARD = 300 * MB
GIB2 = 2 * 1024 * MIB
# The kind allocates 8 MiB per step (~40 ms per 100 MiB here); the watchdog
# samples faster as the limit nears (5 ms at that rate) and freezes the
# attempt's thread before recording, so the child stops within a few steps
# of the limit: measured 296 MiB of growth, 383-391 MiB peak child RSS
# (before: up to 568 MiB recorded, 920 MiB peak). "Near the limit": within
# 128 MiB of it, 1/16 of the 2 GiB asked for. (64 MiB was once exceeded by
# 2.3 MiB in a full CI run on a slow, shared VM: the watchdog thread waits for
# the GIL and a CPU like everything else.)
PEAK_BOUND = HARD + 128 * MIB
# The child's own RSS when it was forked (~86 MiB), which growth does not count.
CHILD_AT_FORK = 150 * MIB
EX_CONFIG = 78


@pytest.fixture(scope="module")
def guarded(_logroot: Path) -> Iterator[Platform]:
    require_postgres()
    factory = PlatformFactory(logroot=_logroot)
    overrides = {
        "demo.allocate": {"hard_memory_limit": HARD, "soft_memory_limit": 150 * MB},
    }
    try:
        yield factory(
            "memguard", env={"JOBS_KIND_OVERRIDES": json.dumps(overrides)}, worker_concurrency=2
        )
    finally:
        factory.close()


class PeakRss(threading.Thread):
    """Samples the RSS of every child of `pid` every 10 ms; `peak` is the largest seen (bytes)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = 0
        self.stop = threading.Event()

    def run(self) -> None:
        main = psutil.Process(self.pid)
        while not self.stop.is_set():
            for child in main.children():
                try:
                    self.peak = max(self.peak, child.memory_info().rss)
                except psutil.Error:
                    continue
            time.sleep(0.01)


@pytest.mark.timeout(180)
@covers("jobs_memory_limits_hit_total", "jobs_worker_child_owned_bytes")
def test_memory_guard_hard_limit_ends_the_attempt_not_the_neighbour_nor_the_worker(
    guarded: Platform,
) -> None:
    worker = guarded.worker
    assert worker is not None
    children_before = {c.pid for c in worker.children()}
    # given a job running on one child for 3 s
    neighbour = guarded.submit("demo.sleep", {"seconds": 3, "step_seconds": 0.05})
    guarded.wait_job(neighbour, statuses=frozenset({"running"}), timeout=30)
    peak = PeakRss(worker.pid)
    peak.start()
    try:
        # when an attempt on the other child allocates 2 GiB under a 300 MB hard limit
        hog = guarded.submit("demo.allocate", {"bytes": GIB2, "heed_cancel": False})
        hog_end = guarded.wait_job(hog, timeout=60)
        neighbour_end = guarded.wait_job(neighbour, timeout=60)
    finally:
        peak.stop.set()
        peak.join(5)

    # then the attempt ended memory_limit and the job is dead for that reason
    assert hog_end["status"] == "dead", hog_end
    (outcome, error_type, message, pid) = guarded.rows(
        "SELECT outcome, error_type, error_message, worker_pid FROM jobs_attempt a "
        "JOIN jobs_job j ON j.id = a.job_id WHERE j.id = %s",
        (hog,),
    )[0]
    assert (outcome, error_type) == ("memory_limit", "MemoryLimitExceeded"), message
    assert guarded.scalar("SELECT dead_reason FROM jobs_job WHERE id = %s", (hog,)) == (
        "memory_limit"
    )
    # and it was stopped near the limit, far from 2 GiB
    recorded = re.search(r"own ([0-9.]+) MiB more", message)
    assert recorded is not None, message
    growth_mib = float(recorded.group(1))
    figures = {"recorded_growth_mib": growth_mib, "peak_child_rss_mib": peak.peak / MIB}
    print("memory guard figures:", figures)
    assert HARD <= growth_mib * MIB <= PEAK_BOUND, figures
    assert peak.peak <= PEAK_BOUND + CHILD_AT_FORK, figures
    # and the neighbour succeeded, the main process lives on, the child was replaced
    assert neighbour_end["status"] == "succeeded", neighbour_end
    assert worker.alive()
    assert pid in children_before

    def replaced() -> bool:
        live = set()
        for child in worker.children():
            try:
                if child.status() != psutil.STATUS_ZOMBIE:
                    live.add(child.pid)
            except psutil.NoSuchProcess:
                continue
        return pid not in live and len(live) == 2

    # (the job is dead as soon as the child recorded it, a moment before it exits)
    wait_for(replaced, timeout=30, what=f"child {pid} replaced, pool back to 2 children")
    # and the next job runs on the fresh pool
    after = guarded.submit("demo.flaky", {"fail_times": 0})
    assert guarded.wait_job(after, timeout=60)["status"] == "succeeded"
    # and Celery saw a FAILURE named for it; the recycle and the limit are counted
    samples = scrape(guarded.worker_metrics_url)
    assert samples.total("celery_task_failed_total", exception="MemoryLimitExceeded") == 1
    assert samples.total("jobs_worker_children_recycled_total", reason="memory_limit") == 1
    assert samples.total("jobs_worker_children_recycled_total", reason="worker_lost") == 0
    assert samples.total("jobs_memory_limits_hit_total", kind="demo.allocate", limit="hard") == 1
    assert samples.total("jobs_attempts_total", outcome="memory_limit") == 1
    # and each live child reports what it owns (a fresh child at its start,
    # a moment after the fork that made it a child): far below its RSS, which
    # counts the pages it shares with the main process
    live = {str(c.pid) for c in worker.children()}

    def owned_by_every_child() -> dict | None:
        found = scrape(guarded.worker_metrics_url).series("jobs_worker_child_owned_bytes")
        return found if {dict(labels)["pid"] for labels in found} == live else None

    owned = wait_for(owned_by_every_child, timeout=10, interval=0.2, what=f"owned bytes of {live}")
    assert all(0 < value < 100 * MIB for value in owned.values()), owned


@pytest.mark.timeout(120)
@covers("jobs_memory_limits_hit_total")
def test_memory_guard_soft_limit_flags_the_attempt_which_stops_and_keeps_its_child(
    guarded: Platform,
) -> None:
    worker = guarded.worker
    assert worker is not None
    # when an attempt that heeds its cancellation flag grows past the 150 MB soft limit
    job = guarded.submit("demo.allocate", {"bytes": 250 * MB, "hold_seconds": 5})
    end = guarded.wait_job(job, timeout=60)

    # then it stopped on the flag: memory_limit, dead, and its child kept
    (outcome, error_type, message, pid) = guarded.rows(
        "SELECT outcome, error_type, error_message, worker_pid FROM jobs_attempt a "
        "WHERE a.job_id = %s",
        (job,),
    )[0]
    assert end["status"] == "dead", end
    assert (outcome, error_type) == ("memory_limit", "MemoryLimitExceeded"), message
    assert message.startswith("soft memory limit exceeded"), message
    assert pid in {c.pid for c in worker.children()}
    samples = scrape(guarded.worker_metrics_url)
    assert samples.total("jobs_memory_limits_hit_total", kind="demo.allocate", limit="soft") >= 1
    # and the worker's report (admin overview) gives each child's owned memory beside its RSS
    # (kept in the state store: PostgreSQL on these platforms, jobs.worker_reports)

    def reported() -> list[dict[str, Any]]:
        rows = guarded.rows("SELECT report FROM jobs_workerreport")
        children = [c for (raw,) in rows for c in json.loads(raw)["children"]]
        return children if children and all(c.get("owned_bytes") for c in children) else []

    wait_for(lambda: bool(reported()), timeout=30, what="owned memory in the worker report")
    for child in reported():
        assert 0 < child["owned_bytes"] < child["rss_bytes"], child


@pytest.mark.timeout(120)
def test_memory_guard_per_child_limit_a_fresh_child_reaches_is_refused_with_one_line(
    guarded: Platform,
) -> None:
    # when a worker starts with a per-child limit of 2 MiB, below what a fresh
    # child owns once started and connected (~3 MiB), and far below the main
    # process's RSS
    label = f"memrefused-{time.time_ns()}"
    process = guarded.stack.start(
        "worker",
        "--concurrency",
        "1",
        "--hostname",
        f"{label}@%h",
        env={"JOBS_WORKER_MAX_MEMORY_PER_CHILD_BYTES": str(2 * MIB)},
        log_name=label,
    )
    try:
        wait_for(
            lambda: not process.alive() or " ready." in process.log(),
            timeout=90,
            interval=0.1,
            what="worker to exit or report ready",
        )
        log = process.log()
        # then it exits with EX_CONFIG before it is ready, saying why in one line
        assert not process.alive(), log[-3000:]
        assert process.popen.returncode == EX_CONFIG, log[-3000:]
        lines = [line for line in log.splitlines() if line.strip() and "[INFO]" not in line]
        assert len(lines) == 1, log[-3000:]
        print("refusal line:", lines[0])
        assert lines[0].startswith("worker refused to start: jobs.E005: "), lines
        assert "JOBS_WORKER_MAX_MEMORY_PER_CHILD_BYTES is 2097152 (2.0 MiB)" in lines[0]
        assert "a fresh child of this worker already owns" in lines[0]
    finally:
        process.stop()
