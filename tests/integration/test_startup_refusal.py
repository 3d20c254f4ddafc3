"""Contradictory settings stop the worker, the web and the scheduler before they take work.

Issue 8, item 6: "The visibility-timeout-versus-hard-limit check (jobs.E001)
runs only in manage.py commands: a worker started with a hard limit above
the visibility timeout consumes jobs. A policy with backoff_floor above
backoff_cap is accepted silently. Expected: the worker, the web server and
the scheduler refuse to start on an Error-level check, with one readable
line; contradictory policies are refused."

Each process is the Procfile's command, started beside the session's
web-only platform (`api_platform`: a valid configuration, real PostgreSQL
and Redis) with one contradictory variable added; the test waits (with a
deadline) for it to exit or to report itself ready.
"""

from __future__ import annotations

import json
import time

import pytest
import redis

from devstack.processes import Process
from devstack.services import free_port, wait_for
from tests.integration.harness import Platform

pytestmark = pytest.mark.integration

# The refusal's exit status (config.startup.EX_CONFIG: sysexits.h's EX_CONFIG).
EX_CONFIG = 78

# The contradiction, the check id it must name, and words of its message.
CONTRADICTIONS = {
    "hard-limit-above-visibility-timeout": (
        # admin.bulk_action's 180 s is the only hard limit at or above 160 s
        {"JOBS_VISIBILITY_TIMEOUT": "160"},
        "jobs.E001",
        "kind 'admin.bulk_action' has hard_time_limit 180s >= JOBS_VISIBILITY_TIMEOUT 160s",
    ),
    "backoff-floor-above-cap": (
        {
            "JOBS_KIND_OVERRIDES": json.dumps(
                {"demo.flaky": {"backoff_floor": 10, "backoff_cap": 1}}
            )
        },
        "jobs.E002",
        "backoff_floor 10 s is above backoff_cap 1 s",
    ),
}
# What each process logs once it would take work: the refusal must come first.
READY = {"worker": " ready.", "web": "Booting worker", "scheduler": "scheduler started"}
STARTUP_DEADLINE = 90


def _start(platform: Platform, name: str, env: dict[str, str]) -> Process:
    label = f"{name}-refused-{time.time_ns()}"
    if name == "worker":
        extra = ["--concurrency", "1", "--hostname", f"{label}@%h"]
        return platform.stack.start("worker", *extra, env=env, log_name=label)
    if name == "web":
        env = {**env, "WEB_BIND": f"127.0.0.1:{free_port()}", "WEB_CONCURRENCY": "1"}
    return platform.stack.start(name, env=env, log_name=label)


def _wait_exit_or_ready(process: Process, name: str) -> None:
    wait_for(
        lambda: not process.alive() or READY[name] in process.log(),
        timeout=STARTUP_DEADLINE,
        interval=0.1,
        what=f"{name} to exit or report ready",
    )


@pytest.mark.parametrize("contradiction", list(CONTRADICTIONS))
@pytest.mark.parametrize("name", ["worker", "web", "scheduler"])
def test_startup_contradictory_settings_refuse_with_one_line(
    api_platform: Platform, name: str, contradiction: str
) -> None:
    env, check_id, words = CONTRADICTIONS[contradiction]
    # given a job waiting in the queue
    job_id = api_platform.submit("demo.flaky", {"fail_times": 0})

    # when the process starts with the contradictory setting
    process = _start(api_platform, name, env)
    try:
        _wait_exit_or_ready(process, name)
        log = process.log()
        # then it exits with EX_CONFIG before reporting itself ready
        assert not process.alive(), f"{name} started with {env}:\n{log[-3000:]}"
        assert process.popen.returncode == EX_CONFIG, log[-3000:]
        # and says why in one line, with no traceback
        lines = [line for line in log.splitlines() if line.strip() and "[INFO]" not in line]
        assert len(lines) == 1, log[-3000:]
        assert lines[0].startswith(f"{name} refused to start: {check_id}: "), lines
        assert words in lines[0]
        # and the job it could have taken is still queued
        assert api_platform.job(job_id)["status"] == "queued"
    finally:
        process.stop()


def test_startup_refused_worker_leaves_the_message_in_the_broker(
    api_platform: Platform,
) -> None:
    # given a queued job and its message
    broker = redis.Redis.from_url(api_platform.redis.url)
    api_platform.submit("demo.flaky", {"fail_times": 0})
    waiting = broker.llen("default")
    assert waiting >= 1

    # when a worker with a hard limit above the visibility timeout starts
    process = _start(api_platform, "worker", {"JOBS_VISIBILITY_TIMEOUT": "30"})
    try:
        _wait_exit_or_ready(process, "worker")
    finally:
        process.stop()

    # then it consumed nothing
    assert process.popen.returncode == EX_CONFIG, process.log()[-3000:]
    assert broker.llen("default") == waiting
