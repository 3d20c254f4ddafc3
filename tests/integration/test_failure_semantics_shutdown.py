"""Failure semantics around the worker process: a SIGTERM and a SIGKILLed main process.

Issue 3, Acceptance: a SIGTERMed worker (a deploy) loses and repeats
nothing; a SIGKILLed worker main process repeats only interrupted attempts,
and the webhook receiver sees each (job, attempt) at most once. The Redis
restart and cancel lines are in test_failure_semantics_broker.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable

import psutil
import pytest

from devstack.processes import ROOT
from devstack.receiver import WebhookReceiver
from devstack.services import wait_for
from tests.integration.harness import BASE_ENV, Platform
from tests.integration.test_failure_semantics import (
    attempts,
    jobs,
    overlapping_attempts,
    status_counts,
    submit_many,
    wait_all_terminal,
)


def running_attempts(platform: Platform) -> int:
    return platform.scalar("SELECT count(*) FROM jobs_attempt WHERE finished_at IS NULL")


@pytest.mark.integration
@pytest.mark.timeout(600)
@pytest.mark.slow
def test_sigterm_mid_load_loses_nothing_and_runs_nothing_twice(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a 4-child worker with 50 jobs of 1.5 s submitted, 4 of them running
    # and the rest ready or reserved
    platform = platform_factory("sigterm", worker_concurrency=4)
    worker = platform.worker
    assert worker is not None
    job_ids = submit_many(platform, "demo.sleep", {"seconds": 1.5, "step_seconds": 0.25}, 50)
    wait_for(lambda: running_attempts(platform) == 4, timeout=60, interval=0.05, what="4 running")

    # when the worker gets SIGTERM (a deploy) and exits
    worker.send_signal(signal.SIGTERM)
    wait_for(lambda: not worker.alive(), timeout=120, interval=0.1, what="the worker to exit")
    at_exit = status_counts(platform)
    print(f"SIGTERM: worker exit code {worker.popen.returncode}, statuses at exit {at_exit}")

    # then it let its running attempts finish (warm shutdown): nothing is left running
    assert running_attempts(platform) == 0, attempts(platform, "WHERE finished_at IS NULL")
    assert "running" not in at_exit, at_exit
    assert at_exit.get("queued", 0) > 0, "the worker drained the queue: nothing was reserved"

    # when a new worker starts
    platform.stack.start_worker(concurrency=4, log_name="worker-restarted")

    # then all 50 jobs end succeeded, each after exactly one attempt: none lost,
    # none ran twice, none recorded as interrupted
    counts = wait_all_terminal(platform, len(job_ids), timeout=300)
    assert counts == {"succeeded": len(job_ids)}, counts
    rows = attempts(platform)
    assert Counter(a["job_id"] for a in rows) == Counter(job_ids)
    assert {a["outcome"] for a in rows} == {"succeeded"}
    assert [j for j in jobs(platform) if j["attempts_made"] != 1] == []


# Every kind's hard limit must stay below the visibility timeout (jobs.E001).
SHORT_LIMITS = {"soft_time_limit": 5, "hard_time_limit": 8}
KIND_NAMES_SCRIPT = (
    "import json, django; django.setup(); from jobs.kinds import kind_names; "
    "print(json.dumps(kind_names()))"
)


def registered_kinds() -> list[str]:
    """Every registered kind, as the platform's own code lists them (no database needed)."""
    env = {
        **os.environ,
        **BASE_ENV,
        "DATABASE_URL": "postgres://unused@127.0.0.1:1/unused",
        "REDIS_URL": "redis://127.0.0.1:1/0",
    }
    out = subprocess.run(
        [sys.executable, "-c", KIND_NAMES_SCRIPT],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.integration
@pytest.mark.timeout(600)
@pytest.mark.slow
def test_sigkilled_worker_main_repeats_only_interrupted_attempts(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a 4-child worker with a 15 s visibility timeout, delivering 60
    # webhooks to a receiver that answers each after 1 s
    platform = platform_factory(
        "sigkill_main",
        env={
            "JOBS_VISIBILITY_TIMEOUT": "15",
            "JOBS_LEASE_GRACE": "5",
            "JOBS_KIND_OVERRIDES": json.dumps(dict.fromkeys(registered_kinds(), SHORT_LIMITS)),
        },
        worker_concurrency=4,
    )
    worker = platform.worker
    assert worker is not None
    with WebhookReceiver() as receiver:
        url = receiver.url("/flaky?fail=0&slow=1&slow_seconds=1")
        job_ids = submit_many(platform, "webhook.deliver", {"url": url, "read_timeout": 5}, 60)
        wait_for(
            lambda: (
                status_counts(platform).get("succeeded", 0) >= 8 and running_attempts(platform) >= 3
            ),
            timeout=120,
            interval=0.05,
            what="8 webhooks delivered and 3 in flight",
        )

        # when the worker's main process is SIGKILLed mid-load, and a new worker starts
        orphans = worker.children()
        worker.send_signal(signal.SIGKILL)
        killed_at = time.time()
        try:
            wait_for(lambda: not worker.alive(), timeout=30, what="the main process gone")
            # (its children die with it: Celery sets PR_SET_PDEATHSIG=SIGKILL in
            # prefork children, so no orphaned attempt can outlive its lease)
            wait_for(
                lambda: not any(_running(o) for o in orphans),
                timeout=30,
                interval=0.1,
                what="the orphaned children gone",
            )
            at_kill = status_counts(platform)
            platform.stack.start_worker(concurrency=4, log_name="worker-restarted")

            # then every job reaches a terminal state (all of them delivered)
            counts = wait_all_terminal(platform, len(job_ids), timeout=300)
        finally:
            # Safety net: Process.stop() looks the group up by the dead main's
            # pid, so it could not reach a surviving child.
            for orphan in orphans:
                try:
                    orphan.kill()
                except psutil.NoSuchProcess:
                    pass
        print(f"SIGKILL main: statuses at kill {at_kill}, final {counts}")
        assert counts == {"succeeded": len(job_ids)}, counts

        # and a job ran more than once only where an earlier attempt was recorded interrupted
        rows = attempts(platform)
        repeated_without_cause = [
            a
            for a in rows
            if any(b["job_id"] == a["job_id"] and b["number"] > a["number"] for b in rows)
            and a["outcome"] not in ("worker_lost", "hard_timeout")
        ]
        assert repeated_without_cause == [], repeated_without_cause
        assert overlapping_attempts(platform) == []
        interrupted = [a for a in rows if a["outcome"] == "worker_lost"]
        print(f"SIGKILL main: {len(rows)} attempts, {len(interrupted)} worker_lost")
        for a in sorted(rows, key=lambda a: a["started"]):
            if a["outcome"] != "succeeded" or a["number"] > 1:
                print(
                    f"  {a['job_id'][:8]} #{a['number']} {a['outcome']:<12}"
                    f" start {a['started'] - killed_at:+.1f}s end {a['finished'] - killed_at:+.1f}s"
                    f" {a['error_message'][:60]}"
                )
        print(f"  last attempt ended {max(a['finished'] for a in rows) - killed_at:+.1f}s")

        # and the receiver saw each (job id, attempt) at most once
        seen = Counter((d.job_id, d.attempt) for d in receiver.deliveries)
        assert {key: n for key, n in seen.items() if n > 1} == {}
        assert {d.job_id for d in receiver.deliveries} == set(job_ids)


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
