"""Catalogue entries of time limits, lost workers, recycles and the retry budget.

Issue 4, Acceptance: "Each catalogue entry is exercised by a test that reads
it with `get_sample_value` and sees it move when, and only when, it should."
See test_telemetry_catalogue.py for how the comparisons work.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devstack.services import wait_for
from tests.integration.harness import Platform
from tests.integration.telemetry import (
    FLAKY,
    HOST,
    MAX_MEMORY_BYTES,
    POLICIES,
    TASK,
    assert_moved_exactly,
    catalogue_platform,
    changes,
    covers,
    lbl,
    live_children,
    quiet,
    settled,
    wait_metric,
)


@pytest.fixture(scope="module")
def plat(_logroot: Path) -> Iterator[Platform]:
    """This module's platform (telemetry.catalogue_platform)."""
    yield from catalogue_platform(_logroot, "telemetry_limits")


# --- time limits ------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.timeout(240)
@covers("jobs_time_limits_hit_total", "celery_task_failed_total")
def test_time_limits_counted_soft_and_hard(plat: Platform) -> None:
    sleep = {"kind": "demo.sleep", "queue": "default"}

    # given a quiet platform (demo.sleep: soft limit 1 s, hard 3 s, one attempt)
    before = quiet(plat)

    # when a demo.sleep that swallows SoftTimeLimitExceeded runs past its soft limit
    soft = plat.wait_job(plat.submit("demo.sleep", {"seconds": 10, "mode": "swallow"}))
    assert [a["outcome"] for a in soft["attempts"]] == ["soft_timeout"], soft
    middle = quiet(plat)

    # then the soft limit is counted once; the attempt ended inside its child (no failure,
    # no lost child)
    assert_moved_exactly(
        before,
        middle,
        {
            "jobs_submitted_total": {lbl(**sleep): 1},
            "celery_task_sent_total": {lbl(**TASK): 1},
            "celery_task_received_total": {lbl(**TASK): 1},
            "celery_task_started_total": {lbl(**TASK): 1},
            "celery_task_succeeded_total": {lbl(**TASK): 1},
            "jobs_time_limits_hit_total": {lbl(**sleep, limit="soft"): 1},
            "jobs_attempts_total": {lbl(**sleep, outcome="soft_timeout"): 1},
            "jobs_completed_total": {lbl(**sleep, outcome="dead"): 1},
            "jobs_dead_letters_total": {lbl(**sleep, reason="exhausted"): 1},
            "jobs_attempt_duration_seconds_count": {lbl(**sleep, outcome="soft_timeout"): 1},
            "celery_task_runtime_count": {lbl(**TASK): 1},
            "jobs_end_to_end_seconds_count": {lbl(**sleep, outcome="dead"): 1},
            "jobs_attempt_rss_growth_bytes_count": {lbl(kind="demo.sleep"): 1},
        },
    )

    # when a demo.sleep that swallows everything is ended by the hard limit (child killed)
    hard = plat.wait_job(plat.submit("demo.sleep", {"seconds": 10, "mode": "unkillable"}))
    assert [a["outcome"] for a in hard["attempts"]] == ["hard_timeout"], hard
    after = quiet(plat)

    # then the hard limit is counted once, as one Celery task failure (TimeLimitExceeded)
    # and one child replaced for the hard time limit; no RSS reading survives the kill
    assert_moved_exactly(
        middle,
        after,
        {
            "jobs_submitted_total": {lbl(**sleep): 1},
            "celery_task_sent_total": {lbl(**TASK): 1},
            "celery_task_received_total": {lbl(**TASK): 1},
            "celery_task_started_total": {lbl(**TASK): 1},
            "celery_task_failed_total": {lbl(**TASK, exception="TimeLimitExceeded"): 1},
            "jobs_time_limits_hit_total": {lbl(**sleep, limit="hard"): 1},
            "jobs_worker_children_recycled_total": {
                lbl(hostname=HOST, reason="hard_time_limit"): 1
            },
            "jobs_attempts_total": {lbl(**sleep, outcome="hard_timeout"): 1},
            "jobs_completed_total": {lbl(**sleep, outcome="dead"): 1},
            "jobs_dead_letters_total": {lbl(**sleep, reason="exhausted"): 1},
            "jobs_attempt_duration_seconds_count": {lbl(**sleep, outcome="hard_timeout"): 1},
            "celery_task_runtime_count": {lbl(**TASK): 1},
            "jobs_end_to_end_seconds_count": {lbl(**sleep, outcome="dead"): 1},
        },
    )


# --- worker loss ------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.timeout(240)
@covers("jobs_workers_lost_total", "jobs_worker_children_recycled_total")
def test_worker_lost_counted_by_signal_until_poison(
    platform_factory: Callable[..., Platform],
) -> None:
    crash = {"kind": "demo.crash", "queue": "default"}

    # given a quiet platform of its own (a poison message must not disturb the others)
    plat = platform_factory("worker_lost")
    before = quiet(plat)

    # when a demo.crash job SIGKILLs its child on every delivery until it is poison (3 losses)
    job = plat.wait_job(plat.submit("demo.crash", {"signal": "SIGKILL"}), timeout=120)
    assert (job["status"], job["dead_reason"]) == ("dead", "poison"), job
    assert [a["outcome"] for a in job["attempts"]] == ["worker_lost"] * 3
    after = quiet(plat)

    # then three workers lost by SIGKILL, three children replaced for it, two retries
    # (the third loss makes it poison); one publish, three deliveries, no task result
    assert_moved_exactly(
        before,
        after,
        {
            "jobs_submitted_total": {lbl(**crash): 1},
            "celery_task_sent_total": {lbl(**TASK): 1},
            "celery_task_received_total": {lbl(**TASK): 3},
            "celery_task_started_total": {lbl(**TASK): 3},
            "jobs_workers_lost_total": {lbl(hostname=HOST, signal="SIGKILL"): 3},
            "jobs_worker_children_recycled_total": {lbl(hostname=HOST, reason="worker_lost"): 3},
            "jobs_attempts_total": {lbl(**crash, outcome="worker_lost"): 3},
            "jobs_retries_total": {lbl(**crash, reason="worker_lost"): 2},
            "celery_task_retried_total": {lbl(**TASK): 2},
            "jobs_completed_total": {lbl(**crash, outcome="dead"): 1},
            "jobs_dead_letters_total": {lbl(**crash, reason="poison"): 1},
            "jobs_attempt_duration_seconds_count": {lbl(**crash, outcome="worker_lost"): 3},
            "celery_task_runtime_count": {lbl(**TASK): 3},
            "jobs_end_to_end_seconds_count": {lbl(**crash, outcome="dead"): 1},
        },
    )


@pytest.mark.integration
@pytest.mark.timeout(180)
@covers("celery_worker_tasks_active")
def test_tasks_active_back_to_zero_after_a_poison_message(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a platform where one lost attempt makes a job poison
    plat = platform_factory("poison_active", env={"JOBS_POISON_AFTER": "1"})
    assert settled(plat).get("celery_worker_tasks_active", {"hostname": HOST}) == 0

    # when a demo.crash job kills its child and is dead-lettered as poison (its message
    # acknowledged instead of requeued)
    job = plat.wait_job(plat.submit("demo.crash", {"signal": "SIGKILL"}), timeout=120)
    assert (job["status"], job["dead_reason"]) == ("dead", "poison"), job

    # then the worker no longer counts it as active (nothing runs)
    wait_metric(
        plat,
        lambda s: s.get("celery_worker_tasks_active", {"hostname": HOST}) == 0,
        timeout=10,
        what="celery_worker_tasks_active back to 0",
        url=plat.worker_metrics_url,
    )


@pytest.mark.integration
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("reason", "env", "limit_bytes"),
    [
        ("max_tasks", {"JOBS_WORKER_MAX_TASKS_PER_CHILD": "1"}, MAX_MEMORY_BYTES),
        # 1 MiB: every child is over it after its first task
        ("max_memory", {"JOBS_WORKER_MAX_MEMORY_PER_CHILD_BYTES": str(2**20)}, 2**20),
    ],
)
@covers("jobs_worker_children_recycled_total", "jobs_worker_max_memory_per_child_bytes")
def test_children_recycled_by_reason(
    platform_factory: Callable[..., Platform], reason: str, env: dict[str, str], limit_bytes: int
) -> None:
    # given a worker whose children are replaced after each task for `reason`
    base_env = {"JOBS_WORKER_MAX_MEMORY_PER_CHILD_BYTES": str(MAX_MEMORY_BYTES)}
    platform = platform_factory(f"recycle_{reason}", env={**base_env, **env})
    worker = platform.worker
    assert worker is not None
    before = quiet(platform)
    assert before.get("jobs_worker_max_memory_per_child_bytes", {"hostname": HOST}) == limit_bytes

    # when three jobs run one after the other
    ran = set()
    for _ in range(3):
        job = platform.wait_job(platform.submit("demo.flaky", {"fail_times": 0}))
        assert job["status"] == "succeeded", job
        ran.add(job["attempts"][0]["worker_pid"])
    after = quiet(platform)

    # then three recycles were counted, for that reason only, and no worker was lost
    assert changes(before, after, "jobs_worker_children_recycled_total") == {
        lbl(hostname=HOST, reason=reason): 3
    }
    assert not changes(before, after, "jobs_workers_lost_total")
    # and children really were replaced: every pid that ran a job exits
    assert len(ran) == 3, ran
    wait_for(
        lambda: not ran & live_children(worker.pid),
        timeout=30,
        what=f"children that ran a job to exit: {ran}",
    )


# --- retry budget ---------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.timeout(180)
@covers("jobs_retry_budget_exhausted_total")
def test_retry_budget_exhausted_counted_per_refused_retry(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a platform whose retry budget is zero (floor 0, ratio 0: every retry is over
    # it) with a 2 s window, so a deferred retry still runs soon
    platform = platform_factory(
        "retry_budget",
        env={
            "JOBS_RETRY_BUDGET_FLOOR": "0",
            "JOBS_RETRY_BUDGET_RATIO": "0",
            "JOBS_RETRY_BUDGET_WINDOW": "2",
            "JOBS_KIND_OVERRIDES": json.dumps(POLICIES),
        },
    )
    before = quiet(platform)

    # when a job that never fails runs, then one that fails twice before succeeding
    ok = platform.wait_job(platform.submit("demo.flaky", {"fail_times": 0}))
    assert ok["status"] == "succeeded"
    middle = quiet(platform)
    job = platform.wait_job(platform.submit("demo.flaky", {"fail_times": 2}), timeout=90)
    assert job["status"] == "succeeded", job
    after = quiet(platform)

    # then the first moved nothing on the budget, the second counted both retries over it
    assert not changes(before, middle, "jobs_retry_budget_exhausted_total")
    assert changes(middle, after, "jobs_retry_budget_exhausted_total") == {lbl(**FLAKY): 2}
    assert changes(middle, after, "jobs_retries_total") == {lbl(**FLAKY, reason="error"): 2}
    # and each deferred retry waited out the window
    delays = [a["retry_delay_seconds"] for a in job["attempts"][:2]]
    assert all(d is not None and d >= 2 for d in delays), delays
