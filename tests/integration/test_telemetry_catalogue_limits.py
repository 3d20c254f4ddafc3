"""Catalogue entries of time limits, lost workers, recycles and the retry budget.

Issue 4, Acceptance: "Each catalogue entry is exercised by a test that reads
it with `get_sample_value` and sees it move when, and only when, it should."
See test_telemetry_catalogue.py for how the comparisons work.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devstack.services import free_port, wait_for
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

    # then the soft limit is counted once; the attempt ended inside its child (no lost
    # child) and, its job dead, it is one Celery task failure named after its exception
    assert_moved_exactly(
        before,
        middle,
        {
            "jobs_submitted_total": {lbl(**sleep): 1},
            "celery_task_sent_total": {lbl(**TASK): 1},
            "celery_task_received_total": {lbl(**TASK): 1},
            "celery_task_started_total": {lbl(**TASK): 1},
            "celery_task_failed_total": {lbl(**TASK, exception="AttemptAbort"): 1},
            "jobs_time_limits_hit_total": {lbl(**sleep, limit="soft"): 1},
            "jobs_attempts_total": {lbl(**sleep, outcome="soft_timeout"): 1},
            "jobs_completed_total": {lbl(**sleep, outcome="dead"): 1},
            "jobs_dead_letters_total": {lbl(**sleep, reason="exhausted"): 1},
            "jobs_attempt_duration_seconds_count": {lbl(**sleep, outcome="soft_timeout"): 1},
            "jobs_end_to_end_seconds_count": {lbl(**sleep, outcome="dead"): 1},
            "jobs_attempt_rss_growth_bytes_count": {lbl(kind="demo.sleep"): 1},
            # recorded by its child, which the abort raised into its code leaves
            # suspect: replaced after the attempt (jobs.child_retire)
            "jobs_worker_child_attempts_total": 1,
            "jobs_worker_children_recycled_total": {lbl(hostname=HOST, reason="aborted"): 1},
        },
    )

    # when a demo.sleep that swallows everything is ended by the hard limit (child killed)
    hard = plat.wait_job(plat.submit("demo.sleep", {"seconds": 10, "mode": "unkillable"}))
    assert [a["outcome"] for a in hard["attempts"]] == ["hard_timeout"], hard
    assert hard["attempts"][0]["rss_after_bytes"], hard
    after = quiet(plat)

    # then the hard limit is counted once, as one Celery task failure (TimeLimitExceeded)
    # and one child replaced for the hard time limit; the child's RSS, read by the main
    # process just before the kill, is the attempt's last reading (one growth sample)
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
            "jobs_end_to_end_seconds_count": {lbl(**sleep, outcome="dead"): 1},
            "jobs_attempt_rss_growth_bytes_count": {lbl(kind="demo.sleep"): 1},
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
    # (the third loss makes it poison: a Celery failure, WorkerLostError); one publish,
    # three deliveries, no task result
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
            "jobs_retry_delay_seconds_count": {lbl(**crash): 2},
            "celery_task_retried_total": {lbl(**TASK): 2},
            "celery_task_failed_total": {lbl(**TASK, exception="WorkerLostError"): 1},
            "jobs_completed_total": {lbl(**crash, outcome="dead"): 1},
            "jobs_dead_letters_total": {lbl(**crash, reason="poison"): 1},
            "jobs_attempt_duration_seconds_count": {lbl(**crash, outcome="worker_lost"): 3},
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
    wait_metric(
        plat,
        lambda s: s.get("celery_worker_tasks_active", {"hostname": HOST}) == 0,
        timeout=30,
        what="the scheduler to see the idle worker",
        url=plat.scheduler_metrics_url,
    )

    # when a demo.crash job kills its child and is dead-lettered as poison (its message
    # acknowledged instead of requeued)
    job = plat.wait_job(plat.submit("demo.crash", {"signal": "SIGKILL"}), timeout=120)
    assert (job["status"], job["dead_reason"]) == ("dead", "poison"), job

    # then the worker no longer counts it as active (nothing runs; from its next heartbeat)
    wait_metric(
        plat,
        lambda s: s.get("celery_worker_tasks_active", {"hostname": HOST}) == 0,
        timeout=10,
        what="celery_worker_tasks_active back to 0",
        url=plat.scheduler_metrics_url,
    )


@pytest.mark.integration
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("reason", "env", "limit_bytes", "job"),
    [
        (
            "max_tasks",
            {"JOBS_WORKER_MAX_TASKS_PER_CHILD": "1"},
            MAX_MEMORY_BYTES,
            ("demo.flaky", {"fail_times": 0}),
        ),
        # 8 MiB of owned memory: above what a fresh child owns (a lower limit is
        # refused at start), below what a child owns after leaking 16 MiB
        (
            "max_memory",
            {"JOBS_WORKER_MAX_MEMORY_PER_CHILD_BYTES": str(8 * 2**20)},
            8 * 2**20,
            ("demo.allocate", {"bytes": 16 * 2**20, "keep": True}),
        ),
    ],
)
@covers("jobs_worker_children_recycled_total", "jobs_worker_max_memory_per_child_bytes")
def test_children_recycled_by_reason(
    platform_factory: Callable[..., Platform],
    reason: str,
    env: dict[str, str],
    limit_bytes: int,
    job: tuple[str, dict[str, object]],
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
        done = platform.wait_job(platform.submit(*job))
        assert done["status"] == "succeeded", done
        ran.add(done["attempts"][0]["worker_pid"])
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


BUDGET_WINDOW = 10.0
BUDGET_FLOOR = 2
FLAKY_BACKOFF_CAP = 0.5  # POLICIES["demo.flaky"]: a longer first delay was the budget's


def _retries_per_window(platform: Platform, window: float) -> dict[int, int]:
    """{budget window index: retries started in it}, from the Attempt rows (epoch-aligned windows)."""
    rows = platform.rows(
        "SELECT floor(extract(epoch FROM started_at) / %s)::bigint, count(*)"
        " FROM jobs_attempt WHERE number > 1 GROUP BY 1",
        (window,),
    )
    return {int(index): int(count) for index, count in rows}


@pytest.mark.integration
@pytest.mark.timeout(180)
@covers(
    "jobs_retry_budget_exhausted_total",
    "jobs_retry_budget_deferred_total",
    "jobs_retry_budget_used",
    "jobs_retry_budget_limit",
)
@pytest.mark.slow
def test_retry_budget_bounds_retries_per_window_deferred_then_dead(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a budget of 2 retries per 10 s window whatever the first attempts (ratio 0),
    # a deferral of at most 15 s (so one is possible even from a window's last second),
    # and demo.flaky retrying after 0.1-0.5 s
    platform = platform_factory(
        "retry_budget",
        env={
            "JOBS_RETRY_BUDGET_FLOOR": str(BUDGET_FLOOR),
            "JOBS_RETRY_BUDGET_RATIO": "0",
            "JOBS_RETRY_BUDGET_WINDOW": str(BUDGET_WINDOW),
            "JOBS_RETRY_BUDGET_MAX_DEFERRAL": "15",
            "JOBS_KIND_OVERRIDES": json.dumps(POLICIES),
        },
    )
    before = quiet(platform)
    # (early in a budget window, which is aligned on the epoch: the 8 first
    # attempts then fail in one window even when a loaded machine spreads them
    # over 8 s, and the bounds below follow from the budget's rules alone:
    # 2 retries in that window and in each of the two later ones the 15 s
    # deferral can reach, so 2 to 6 retried, and one exhaustion line per window)
    wait_for(
        lambda: 0.5 <= time.time() % BUDGET_WINDOW < 2.0,
        timeout=BUDGET_WINDOW + 1,
        interval=0.05,
        what="the start of a budget window",
    )

    # when 8 jobs whose first attempt fails arrive at once
    ids = [platform.submit("demo.flaky", {"fail_times": 1}) for _ in range(8)]
    # then the web's gauges show the budget in use against its limit (the floor)
    during = wait_metric(
        platform,
        lambda s: (s.get("jobs_retry_budget_used", {"kind": "demo.flaky"}) or 0) >= 1,
        timeout=30,
        what="retry budget in use",
        url=platform.url("/metrics"),
    )
    assert during.get("jobs_retry_budget_limit", {"kind": "demo.flaky"}) == BUDGET_FLOOR
    jobs = [platform.wait_job(i, timeout=60) for i in ids]
    after = quiet(platform)

    # then a few were retried (and succeeded), the rest are dead with reason "budget"
    by_status = {j["status"] for j in jobs}
    assert by_status <= {"succeeded", "dead"}, jobs
    dead = [j for j in jobs if j["status"] == "dead"]
    assert dead, "the budget refused no retry"
    assert {j["dead_reason"] for j in dead} == {"budget"}
    retried = 8 - len(dead)
    assert 2 <= retried <= 6, jobs
    # and no budget window saw more retries start than the floor (judged from Attempt rows)
    per_window = _retries_per_window(platform, BUDGET_WINDOW)
    assert sum(per_window.values()) == retried
    assert max(per_window.values()) <= BUDGET_FLOOR, per_window
    # and the counters say so: every refusal is exhausted (at the decision, or at a late
    # retry's start), the deferred ones retried later
    exhausted = changes(before, after, "jobs_retry_budget_exhausted_total").get(lbl(**FLAKY), 0)
    deferred = changes(before, after, "jobs_retry_budget_deferred_total").get(lbl(**FLAKY), 0)
    first_delays = [j["attempts"][0]["retry_delay_seconds"] for j in jobs]
    refused = sum(1 for d in first_delays if d is None or d > FLAKY_BACKOFF_CAP)
    assert exhausted >= max(refused, len(dead) + 1), (exhausted, refused, len(dead))
    assert deferred >= 1, "no retry was deferred"
    assert changes(before, after, "jobs_dead_letters_total") == {
        lbl(**FLAKY, reason="budget"): len(dead)
    }
    assert not changes(before, after, "jobs_retry_budget_fallback_total")
    # and the exhaustion was logged once per window, not per job
    logged = platform.log_tails(200_000).count("retry budget exhausted kind=demo.flaky")
    assert 1 <= logged <= 3, logged


@pytest.mark.integration
@pytest.mark.timeout(180)
@covers("jobs_retry_budget_fallback_total")
def test_retry_budget_unreachable_falls_back_to_the_backoff(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a platform whose budget Redis does not answer (nothing listens there),
    # with the strictest budget: had it been asked, no retry would pass
    platform = platform_factory(
        "retry_budget_away",
        env={
            # The Redis state store's fallback (the PostgreSQL store's is the database's
            # own: tests/integration/test_state_store_postgres.py).
            "JOBS_STATE_STORE": "redis",
            "JOBS_RETRY_BUDGET_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
            "JOBS_RETRY_BUDGET_FLOOR": "0",
            "JOBS_RETRY_BUDGET_RATIO": "0",
            "JOBS_KIND_OVERRIDES": json.dumps(POLICIES),
        },
    )
    before = quiet(platform)

    # when a job fails twice before it succeeds
    job = platform.wait_job(platform.submit("demo.flaky", {"fail_times": 2}), timeout=60)
    after = quiet(platform)

    # then both retries kept their normal backoff (0.1-0.5 s), and the fallback says so
    assert job["status"] == "succeeded", job
    delays = [a["retry_delay_seconds"] for a in job["attempts"][:2]]
    assert all(d is not None and d <= 0.5 for d in delays), delays
    assert changes(before, after, "jobs_retry_budget_fallback_total") == {lbl(**FLAKY): 2}
    assert not changes(before, after, "jobs_retry_budget_exhausted_total")
    assert changes(before, after, "jobs_retries_total") == {lbl(**FLAKY, reason="error"): 2}
