"""Soak: ten minutes of mixed load with OTLP export on and children recycled; no child wedges.

Issue 19, item 1, Acceptance: "a soak of at least 10 minutes with OTLP
export on, mixed kinds and child recycling, with 0 wedged children and 0
healthy webhooks dead". Marked soak (`pytest -m soak`); JOBS_SOAK_SECONDS
sets the length (default 600). The platform is test_telemetry_fork_safety's
(a slow OTLP receiver, a child recycled every 3 tasks, the shim that slows a
thread's first `netrc` import in the worker's main process to 3 s), under a
steady stream of webhooks to a healthy receiver, flaky jobs, short sleeps,
hard time limits and lost children. A wedged child shows as attempts of a
healthy webhook ended by a time limit (each HTTP call of such a child hangs
to the soft limit): the figures count them per child. Prints one figures
line (-s or -rP).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest

from devstack.otlp_receiver import SlowOtlpReceiver
from devstack.receiver import WebhookReceiver
from tests.integration.harness import Platform
from tests.integration.telemetry import scrape
from tests.integration.test_failure_semantics import attempts, jobs, wait_all_terminal
from tests.integration.test_telemetry_fork_safety import UNGATED, fork_safety_platform

pytestmark = [pytest.mark.integration, pytest.mark.soak]

SOAK_SECONDS = float(os.environ.get("JOBS_SOAK_SECONDS", "600"))
# One round every ROUND_SECONDS: 3 webhooks, 1 flaky, 1 short sleep; every 10th
# round a hard time limit, every 15th a lost child (~2 attempts a second, what
# 3 children recycled every 3 tasks, each flushing to a 1 s receiver at exit,
# keep up with on a loaded 2-core machine).
ROUND_SECONDS = 3.0
CONCURRENCY = 3
FORK_WAIT = re.compile(r"fork of pid \d+ waited (\d+\.\d+) s")


def submit_rounds(platform: Platform, hooks: WebhookReceiver, stop: threading.Event) -> dict:
    submitted: dict[str, list[str]] = {"webhook": [], "other": []}
    n = 0
    while not stop.is_set():
        started = time.monotonic()
        for _ in range(3):
            submitted["webhook"].append(
                platform.submit("webhook.deliver", {"url": hooks.url("/ok")})
            )
        submitted["other"].append(platform.submit("demo.flaky", {"fail_times": 1}))
        submitted["other"].append(platform.submit("demo.sleep", {"seconds": 0.2}))
        if n % 10 == 5:
            submitted["other"].append(
                platform.submit("demo.sleep", {"seconds": 30, "mode": "unkillable"})
            )
        if n % 15 == 9:
            submitted["other"].append(platform.submit("demo.crash", {"signal": "SIGKILL"}))
        n += 1
        stop.wait(max(0.0, ROUND_SECONDS - (time.monotonic() - started)))
    return submitted


@pytest.mark.timeout(SOAK_SECONDS + 1200)
def test_soak_no_child_wedges_with_otlp_export_and_recycling(
    platform_factory: Callable[..., Platform],
) -> None:
    with SlowOtlpReceiver(delay=1.0) as otlp, WebhookReceiver() as hooks:
        platform = fork_safety_platform(platform_factory, otlp, concurrency=CONCURRENCY)
        worker = platform.worker
        assert worker is not None

        # given a steady mixed load for SOAK_SECONDS
        stop = threading.Event()
        result: dict = {}
        feeder = threading.Thread(
            target=lambda: result.update(submit_rounds(platform, hooks, stop)), daemon=True
        )
        started = time.monotonic()
        feeder.start()
        stop.wait(SOAK_SECONDS)
        stop.set()
        feeder.join(60)
        webhooks = result["webhook"]
        total = len(webhooks) + len(result["other"])
        drained = time.monotonic()
        counts = wait_all_terminal(platform, total, timeout=600)
        drain_seconds = time.monotonic() - drained
        elapsed = time.monotonic() - started

        # then: the figures
        rows = attempts(platform)
        hook_ids = set(webhooks)
        hook_rows = [a for a in rows if a["job_id"] in hook_ids]
        hook_status = Counter(j["status"] for j in jobs(platform) if j["id"] in hook_ids)
        limited = [a for a in hook_rows if a["outcome"] in ("soft_timeout", "hard_timeout")]
        wedged_children = sorted({a["worker_pid"] for a in limited})
        children = {a["worker_pid"] for a in rows}
        samples = scrape(platform.worker_metrics_url)
        recycled = {
            dict(k)["reason"]: int(v)
            for k, v in samples.series("jobs_worker_children_recycled_total").items()
            if v
        }
        log = worker.log()
        waits = [float(m.group(1)) for m in FORK_WAIT.finditer(log)]
        durations = sorted(a["finished"] - a["started"] for a in hook_rows)
        figures = {
            "seconds": round(elapsed),
            "drain_seconds": round(drain_seconds),
            "jobs": total,
            "by_status": counts,
            "webhooks": len(webhooks),
            "webhooks_by_status": dict(hook_status),
            "webhook_attempts": dict(Counter(a["outcome"] for a in hook_rows)),
            "webhook_attempt_p99_seconds": round(durations[int(0.99 * (len(durations) - 1))], 3),
            "webhook_attempt_max_seconds": round(durations[-1], 3),
            "children_seen": len(children),
            "children_recycled": recycled,
            "wedged_children": len(wedged_children),
            "forks_waiting_over_50ms": len(waits),
            "longest_fork_wait_seconds": max(waits, default=0.0),
            "otlp_requests": otlp.requests,
            "attempt_spans_received": len(otlp.attempt_spans()),
            "ungated_thread_lines": log.count(UNGATED),
        }
        print("fork-safety soak:", json.dumps(figures))

        assert wedged_children == [], limited
        assert hook_status == {"succeeded": len(webhooks)}, hook_status
        assert figures["ungated_thread_lines"] == 0
        assert sum(recycled.values()) >= SOAK_SECONDS / 10, recycled
