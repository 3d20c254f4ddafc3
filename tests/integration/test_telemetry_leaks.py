"""Thread leaks are flagged per attempt: a log line and a counter.

Issue 4, Acceptance: "A kind that leaves a thread running after each attempt
is flagged (log line + counter); one that joins its threads is not."

`demo.leak_thread` (jobs/kinds/leaky.py) starts one thread sleeping
`seconds` per attempt and joins it only when `join` is true.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import psutil
import pytest

from devstack.services import wait_for
from tests.integration.harness import Platform
from tests.integration.telemetry import HOST, changes, covers, lbl, scrape, settled

LEAK = {"kind": "demo.leak_thread", "resource": "threads"}


def _leak_lines(platform: Platform, job_id: str) -> list[str]:
    """Worker log lines flagging a leak for `job_id`."""
    assert platform.worker is not None
    return [
        line
        for line in platform.worker.log().splitlines()
        if "leak suspected" in line and f"job_id={job_id}" in line
    ]


@pytest.mark.integration
@pytest.mark.timeout(180)
@covers("jobs_leak_suspected_total", "jobs_worker_child_threads")
def test_leaked_thread_flagged_joined_thread_not(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a fresh platform (children that have run nothing yet)
    platform = platform_factory("leaks")
    assert platform.worker is not None
    before = settled(platform)

    # when four attempts start a thread each and join it (two per child, the first
    # attempts of each child, so lazily started helpers of a first attempt would show)
    joined = [platform.submit("demo.leak_thread", {"join": True, "seconds": 0.3}) for _ in range(4)]
    for job_id in joined:
        job = platform.wait_job(job_id)
        assert job["status"] == "succeeded", job
        assert job["result"] == {"joined": True, "thread_alive": False}
    middle = settled(platform)

    # then none is flagged: no log line, no count
    assert not any("leak suspected" in line for line in platform.worker.log().splitlines()), [
        line for line in platform.worker.log().splitlines() if "leak suspected" in line
    ]
    assert not changes(before, middle, "jobs_leak_suspected_total")

    # when one attempt leaves its thread running (8 s) after it returns
    leaky_id = platform.submit("demo.leak_thread", {"join": False, "seconds": 8})
    job = platform.wait_job(leaky_id)
    assert job["status"] == "succeeded", job
    pid = job["attempts"][0]["worker_pid"]

    # then it is flagged once: a warning naming kind, resource and count, and the counter
    lines = wait_for(lambda: _leak_lines(platform, leaky_id), timeout=10, what="leak log line")
    assert len(lines) == 1, lines
    assert re.search(
        r"WARNING .*leak suspected kind=demo\.leak_thread resource=threads count=1 ", lines[0]
    ), lines
    after = settled(platform)
    assert changes(middle, after, "jobs_leak_suspected_total") == {lbl(**LEAK): 1}
    assert after.get("jobs_leak_suspected_total", LEAK) == 1

    # and the child's thread gauge shows the leaked thread while it lives, then drops by one
    threads_key = {"hostname": HOST, "pid": str(pid)}
    with_leak = scrape(platform.worker_metrics_url).get("jobs_worker_child_threads", threads_key)
    assert with_leak == psutil.Process(pid).num_threads(), with_leak
    dropped = wait_for(
        lambda: (
            value
            if (
                value := scrape(platform.worker_metrics_url).get(
                    "jobs_worker_child_threads", threads_key
                )
            )
            == with_leak - 1
            else None
        ),
        timeout=20,
        interval=0.5,
        what="leaked thread to end",
    )
    assert dropped == with_leak - 1
    # and no other attempt was blamed for it
    assert settled(platform).get("jobs_leak_suspected_total", LEAK) == 1
    assert [_leak_lines(platform, j) for j in joined] == [[]] * 4
