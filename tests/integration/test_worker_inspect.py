"""Worker memory in `celery inspect stats`, dumps on demand (`jobs_dump`), and Flower.

Issue 4, items 6 and 8. Acceptance: "`celery inspect stats` shows the memory
block; Flower's `/metrics` answers; Flower's API refuses requests without
credentials".
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
from celery import Celery

from devstack.processes import Process
from devstack.services import free_port, wait_for
from observability.dumps import request_dump
from tests.integration.harness import Platform

HOUR = 3600.0
MAX_MEMORY_BYTES = 300 * 1024 * 1024  # a whole number of KiB, as Celery's setting is
MAX_TASKS = 50
# Seconds to wait for a reply; a request addressed to one node returns as soon as it answers.
INSPECT_TIMEOUT = 20.0
MIN_RSS_BYTES = 5 * 1024 * 1024  # any live Python process with Django loaded is above this
FLOWER_AUTH = ("u", "p")


def _isolated(tmp_path: Path) -> dict[str, str]:
    """Environment that keeps this platform's worker metrics apart from any other running one."""
    return {
        "JOBS_METRICS_DIR": str(tmp_path / "metrics"),
        "JOBS_WORKER_METRICS_PORT": str(free_port()),
    }


def _nodename(worker: Process) -> str:
    """The Celery node name the worker logged when it became ready."""
    match = re.search(r"(\S+@\S+) ready\.", worker.log())
    assert match, worker.log()[-3000:]
    return match.group(1)


def _inspect_cli(platform: Platform, worker: Process, command: str, *args: str) -> Any:
    """`celery -A config inspect <command> <args> --json`, addressed to `worker`; its reply."""
    node = _nodename(worker)
    result = platform.stack.run(
        ["celery", "-A", "config", "inspect", command, *args]
        + ["--json", "--timeout", str(INSPECT_TIMEOUT), "--destination", node],
        timeout=INSPECT_TIMEOUT + 90,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no JSON from celery inspect {command}:\n{result.stdout}\n{result.stderr}"
    return json.loads(lines[-1])[node]


def _live_children(worker: Process) -> set[int]:
    return {child.pid for child in worker.children() if child.status() != "zombie"}


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_inspect_stats_shows_memory_block_per_live_child(
    platform_factory: Callable[..., Platform], tmp_path: Path
) -> None:
    # given a platform with known recycle limits, where demo.flaky retries an hour later
    platform = platform_factory(
        "inspect_stats",
        env={
            **_isolated(tmp_path),
            "JOBS_WORKER_MAX_MEMORY_PER_CHILD_BYTES": str(MAX_MEMORY_BYTES),
            "JOBS_WORKER_MAX_TASKS_PER_CHILD": str(MAX_TASKS),
            "JOBS_KIND_OVERRIDES": json.dumps(
                {"demo.flaky": {"backoff_base": HOUR, "backoff_floor": HOUR, "backoff_cap": HOUR}}
            ),
        },
        worker_concurrency=2,
    )
    # and one job waiting for its retry
    job_id = platform.submit("demo.flaky", {"fail_times": 1})
    platform.wait_job(job_id, statuses=frozenset({"retrying"}))

    # when `celery inspect stats` and `inspect jobs_memory` ask the worker
    stats = _inspect_cli(platform, platform.worker, "stats")
    memory = _inspect_cli(platform, platform.worker, "jobs_memory")

    # then the stats show each child's RSS and threads and the limits, readable (MiB)
    assert stats["memory_children"].count(" MiB RSS, ") == 2, stats
    assert stats["memory_main_process"].endswith(" MiB RSS"), stats
    assert stats["memory_limit_per_child"] == (
        f"{MAX_MEMORY_BYTES / 2**20:.1f} MiB, {MAX_TASKS} tasks"
    ), stats
    assert stats["pending_retries"] == 1
    # and jobs_memory has the same in bytes: one entry per live child
    pids = [child["pid"] for child in memory["children"]]
    assert len(pids) == 2, memory
    assert set(pids) == _live_children(platform.worker) == set(stats["pool"]["processes"])
    for child in memory["children"]:
        assert child["rss_bytes"] > MIN_RSS_BYTES, child
        assert child["threads"] >= 1, child
    assert memory["main_rss_bytes"] > MIN_RSS_BYTES
    # and the configured limits and the pending retries
    assert memory["max_memory_per_child_bytes"] == MAX_MEMORY_BYTES
    assert memory["max_tasks_per_child"] == MAX_TASKS
    assert memory["pending_retries"] == 1


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_jobs_dump_returns_each_childs_rss_stacks_and_top_allocations(
    broker_platform_factory: Callable[..., Platform], tmp_path: Path
) -> None:
    # given a worker whose children trace allocations, one of them busy in a long attempt
    # (on each broker: the dump is a broadcast and its replies travel through the broker)
    platform = broker_platform_factory(
        "jobs_dump",
        env={**_isolated(tmp_path), "JOBS_TRACEMALLOC": "true"},
        scheduler=False,
        worker_concurrency=2,
    )
    job_id = platform.submit("demo.sleep", {"seconds": 40, "step_seconds": 0.05})
    platform.wait_job(job_id, statuses=frozenset({"running"}))
    node = _nodename(platform.worker)

    # when jobs_dump is asked from Python, for the top 5 allocation sites; "running"
    # is committed a few bytecodes before the kind's code is entered, so a dump
    # that lands in between is asked again (bounded), not counted as a miss
    app = Celery(broker=platform.broker_url, set_as_current=False)
    try:
        give_up = time.monotonic() + 20.0
        while True:
            replies = request_dump(
                app, destination=[node], top=5, deadline=5.0, timeout=INSPECT_TIMEOUT
            )
            if time.monotonic() > give_up or any(
                "jobs/kinds/faults.py" in line
                for child in replies[node]["children"]
                for thread in child["threads"]
                for line in thread["stack"]
            ):
                break
    finally:
        app.close()

    # then every live child answered with its RSS, its threads' stacks and allocations
    dump = replies[node]
    children = dump["children"]
    assert {child["pid"] for child in children} == _live_children(platform.worker)
    assert dump["main"]["rss_bytes"] > MIN_RSS_BYTES
    for child in children:
        assert child["error"] is None, child
        assert child["rss_bytes"] > MIN_RSS_BYTES
        assert child["num_threads"] >= len(child["threads"]) >= 1
        main = next(t for t in child["threads"] if t["name"] == "MainThread")
        assert main["stack"], child
        allocations = child["tracemalloc"]
        assert allocations["enabled"] is True
        assert 1 <= len(allocations["top"]) <= 5, allocations
        assert all(site["size_bytes"] > 0 and ":" in site["site"] for site in allocations["top"])
        assert allocations["traced_bytes"] >= sum(site["size_bytes"] for site in allocations["top"])
    # and the busy child's main thread is inside the sleeping job's code
    main_stacks = [
        "\n".join(t["stack"])
        for child in children
        for t in child["threads"]
        if t["name"] == "MainThread"
    ]
    assert any("jobs/kinds/faults.py" in stack for stack in main_stacks), main_stacks

    # given a second worker with tracemalloc off
    plain = platform.stack.start_worker(
        concurrency=1,
        log_name="worker-plain",
        env={"JOBS_TRACEMALLOC": "false", "JOBS_WORKER_METRICS_PORT": str(free_port())},
    )
    # when `celery inspect jobs_dump` asks it from the command line
    dump = _inspect_cli(platform, plain, "jobs_dump", "3", "5.0")
    # then its child still reports RSS and stacks, and no allocations
    (child,) = dump["children"]
    assert child["pid"] in _live_children(plain)
    assert child["error"] is None, child
    assert child["rss_bytes"] > MIN_RSS_BYTES
    assert any(t["name"] == "MainThread" and t["stack"] for t in child["threads"])
    assert child["tracemalloc"] == {"enabled": False}


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_flower_requires_credentials_serves_metrics_and_shows_worker_memory(
    platform_factory: Callable[..., Platform], tmp_path: Path
) -> None:
    # given a worker (DEBUG off), and Flower started without credentials configured
    platform = platform_factory("flower", env=_isolated(tmp_path), web=False, scheduler=False)
    node = _nodename(platform.worker)
    db = tmp_path / "flower" / "flower.db"
    refused = platform.stack.start(
        "flower",
        f"--port={free_port()}",
        env={"FLOWER_BASIC_AUTH": "", "FLOWER_DB": str(db)},
        log_name="flower-no-auth",
    )
    # then it refuses to start
    wait_for(lambda: not refused.alive(), timeout=90, what="flower without credentials to exit")
    assert refused.popen.returncode != 0
    assert "FLOWER_BASIC_AUTH" in refused.log()

    # when Flower starts with credentials
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    flower = platform.stack.start(
        "flower", f"--port={port}", env={"FLOWER_BASIC_AUTH": "u:p", "FLOWER_DB": str(db)}
    )

    def healthy() -> bool:
        if not flower.alive():
            raise RuntimeError(f"flower exited early:\n{flower.log()[-3000:]}")
        try:
            return requests.get(f"{base}/healthcheck", timeout=2).ok
        except requests.RequestException:
            return False

    wait_for(healthy, timeout=90, what="flower /healthcheck")

    # then its API refuses requests without (or with wrong) credentials
    assert requests.get(f"{base}/api/workers", timeout=10).status_code == 401
    assert requests.get(f"{base}/api/workers", auth=("u", "x"), timeout=10).status_code == 401
    # and its /metrics answers, with the worker online (events flow)
    online = f'flower_worker_online{{worker="{node}"}} 1.0'

    def worker_online() -> bool:
        response = requests.get(f"{base}/metrics", auth=FLOWER_AUTH, timeout=10)
        assert response.status_code == 200, response.text[:500]
        return online in response.text

    wait_for(worker_online, timeout=60, interval=0.5, what=f"{online} on flower /metrics")

    # and, with credentials, the API shows the worker's memory rows (its worker page does too)
    def memory() -> dict[str, Any] | None:
        response = requests.get(
            f"{base}/api/workers",
            params={"refresh": "1", "workername": node},
            auth=FLOWER_AUTH,
            timeout=30,
        )
        assert response.status_code == 200, response.text[:500]
        stats = response.json().get(node, {}).get("stats", {})
        return stats if "memory_children" in stats else None

    stats = wait_for(memory, timeout=60, interval=0.5, what="memory rows in flower /api/workers")
    assert {
        f"pid {pid}:" in stats["memory_children"] for pid in _live_children(platform.worker)
    } == {True}, stats
    assert stats["pending_retries"] == 0
    assert stats["memory_limit_per_child"].endswith(" tasks"), stats

    # when Flower stops, then its state is persisted
    assert flower.stop() == 0
    assert list(db.parent.glob(f"{db.name}*")), list(db.parent.iterdir())
