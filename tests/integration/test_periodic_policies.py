"""Periodic schedules' missed-run and overlap policies, with real scheduler and worker processes.

Issue 23, Acceptance: "The schedulers all stopped for 5 minutes, then one
started: the missed-run policy does what it says (one catch-up job, or
none), never one job per missed tick", and "A schedule whose job takes
longer than its interval: with 'skip while live' no two jobs of it are live
at once; the skips are counted."

The 5-minute gap is simulated in the database in the slow tier: with every
scheduler stopped, the schedules' next tick (and its run time) is moved 5
minutes back, which is the state a scheduler stopped 5 minutes ago leaves
(the tick pass reads nothing else). The soak tier (`pytest -m soak`) waits
the 5 minutes out instead, with the database's clock as the judge. Then
one scheduler starts.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from devstack.services import wait_for
from tests.integration.harness import Platform
from tests.integration.periodic import database_now, read_ticks, schedules_env

GAP_SCHEDULES = {
    "gap-catch-up": {"kind": "demo.flaky", "every": 10, "overlap": "allow"},
    "gap-skip": {"kind": "demo.flaky", "every": 10, "overlap": "allow", "missed": "skip"},
}


def _jobs_of(platform: Platform, name: str) -> int:
    return int(
        platform.scalar(
            "SELECT count(*) FROM jobs_job WHERE idempotency_key LIKE 'schedule:' || "
            "(SELECT id FROM jobs_schedule WHERE name = %s)::text || ':%%'",
            (name,),
        )
    )


GAP = timedelta(minutes=5)


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "waited",
    [
        pytest.param(False, id="simulated", marks=pytest.mark.slow),
        pytest.param(True, id="waited", marks=pytest.mark.soak),
    ],
)
def test_schedulers_stopped_five_minutes_missed_policy_makes_one_catch_up_job_or_none(
    platform_factory: Callable[..., Platform], waited: bool
) -> None:
    # given two schedules every 10 s (catch-up, skip) that ticked under a scheduler
    platform = platform_factory(
        "periodic_gap", web=False, worker=False, env=schedules_env(GAP_SCHEDULES)
    )
    assert platform.scheduler is not None
    for name in GAP_SCHEDULES:
        wait_for(lambda n=name: _jobs_of(platform, n) >= 1, timeout=60, what=f"{name} ticked")

    # when every scheduler stops, and the schedules are left as 5 minutes ago
    platform.scheduler.stop(timeout=10)
    before = {name: _jobs_of(platform, name) for name in GAP_SCHEDULES}
    if waited:
        stopped_at = database_now(platform)
        wait_for(
            lambda: database_now(platform) >= stopped_at + GAP,
            timeout=GAP.total_seconds() + 60,
            interval=1.0,
            what="5 minutes with no scheduler",
        )
    else:
        platform.rows(
            "UPDATE jobs_schedule SET next_tick_at = next_tick_at - interval '5 minutes', "
            "next_run_at = next_run_at - interval '5 minutes' RETURNING id"
        )
    restarted_at = database_now(platform)
    # and one scheduler starts
    platform.stack.start_scheduler(log_name="scheduler-after-gap")
    wait_for(
        lambda: platform.scalar(
            "SELECT bool_and(next_run_at > now()) AND bool_and(last_tick_at > %s) "
            "FROM jobs_schedule WHERE name = ANY(%s)",
            (restarted_at, list(GAP_SCHEDULES)),
        ),
        timeout=60,
        what="both schedules caught up",
    )

    # then the missed ticks made one catch-up job (catch-up) or none (skip); the tick
    # of the current 10 s, due within JOBS_SCHEDULE_MISSED_AFTER, ran as usual, and so
    # did the ticks due after the restart (the wait above ends at the first of them)
    figures = []
    for name, spec in GAP_SCHEDULES.items():
        after = [t for t in read_ticks(platform, name) if t.created_at >= restarted_at]
        missed = sum(t.missed + (t.outcome in ("missed", "caught_up")) for t in after)
        caught_up = [t for t in after if t.outcome == "caught_up"]
        on_time = [t for t in after if t.outcome == "created" and t.tick_at <= restarted_at]
        later = [t for t in after if t.outcome == "created" and t.tick_at > restarted_at]
        new_jobs = _jobs_of(platform, name) - before[name]
        figures.append(
            f"{name}: {missed} missed ticks -> {len(caught_up)} catch-up job(s); "
            f"{len(on_time)} on-time tick job; {len(later)} tick job(s) due after the "
            f"restart; {new_jobs} new jobs in all"
        )
        # 5 minutes of 10 s ticks are 30, the last of them the current tick (on time)
        assert missed >= 29, figures
        assert len(on_time) <= 1
        if spec.get("missed") == "skip":
            assert caught_up == []
            assert new_jobs == len(on_time) + len(later)
        else:
            assert len(caught_up) == 1
            assert caught_up[0].missed == missed - 1
            assert new_jobs == 1 + len(on_time) + len(later)
    print("\n".join(figures))  # noqa: T201 - the acceptance figures


def _overlap_count(metrics_url: str, name: str) -> float | None:
    try:
        text = requests.get(metrics_url, timeout=5).text
    except requests.RequestException:
        return None
    for family in text_string_to_metric_families(text):
        if family.name == "jobs_schedule_ticks":
            for sample in family.samples:
                if sample.name.endswith("_total") and sample.labels == {
                    "schedule": name,
                    "outcome": "overlap",
                }:
                    return sample.value
    return None


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_schedule_longer_than_its_interval_skip_while_live_never_overlaps(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a schedule every 1 s whose job sleeps 3 s, skipping ticks while its job is live
    schedules = {
        "slow-job": {"kind": "demo.sleep", "payload": {"seconds": 3}, "every": 1, "overlap": "skip"}
    }
    platform = platform_factory("periodic_overlap", web=False, env=schedules_env(schedules))

    # when it runs for a while (4 jobs)
    wait_for(
        lambda: (
            platform.scalar(
                "SELECT count(*) FROM jobs_job WHERE kind = 'demo.sleep' AND status = 'succeeded'"
            )
            >= 4
        ),
        timeout=150,
        what="4 jobs of the schedule ran",
    )

    # then no two of its jobs were live at once (created .. finished never overlap)
    spans = platform.rows(
        "SELECT created_at, finished_at FROM jobs_job WHERE kind = 'demo.sleep' ORDER BY created_at"
    )
    overlaps = [
        (a, b) for a, b in zip(spans, spans[1:], strict=False) if a[1] is None or b[0] < a[1]
    ]
    assert not overlaps, overlaps
    # and the skipped ticks are counted: rows in the database, and the same on /metrics
    ticks = read_ticks(platform, "slow-job")
    skipped = sum(1 for t in ticks if t.outcome == "overlap")
    created = sum(1 for t in ticks if t.job_id is not None)
    assert skipped >= created  # a 3 s job every 1 s: at least one skip per job
    wait_for(
        lambda: (
            _overlap_count(platform.scheduler_metrics_url, "slow-job")
            == sum(1 for t in read_ticks(platform, "slow-job") if t.outcome == "overlap")
        ),
        timeout=10,
        what="overlap skips on /metrics match the rows",
    )
    print(  # noqa: T201 - the acceptance figures
        f"slow-job: {len(spans)} jobs, 0 overlapping, {skipped} ticks skipped (overlap), "
        f"{created} ticks with a job"
    )
