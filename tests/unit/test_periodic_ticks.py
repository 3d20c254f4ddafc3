"""jobs.periodic.ticks: one job per tick, missed and overlap policies, on a fixed clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobs.models import Job, JobStatus, Schedule, ScheduleTick
from jobs.periodic.ticks import schedules_tick
from jobs.reasons import TickOutcome

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
pytestmark = pytest.mark.django_db


def _schedule(**fields: Any) -> Schedule:
    defaults: dict[str, Any] = {
        "name": "every10",
        "kind": "demo.flaky",
        "payload": {"fail_times": 0},
        "interval_seconds": 10,
    }
    return Schedule.objects.create(**{**defaults, **fields})


def _ticks(schedule: Schedule) -> list[tuple[datetime, str, int]]:
    return list(
        ScheduleTick.objects.filter(schedule=schedule)
        .order_by("tick_at")
        .values_list("tick_at", "outcome", "missed")
    )


def test_schedules_tick_plans_a_new_schedule_from_now_then_creates_each_tick_once() -> None:
    schedule = _schedule()
    # a new schedule gets its first tick after now, and no job
    assert schedules_tick(now=T0 + timedelta(seconds=3)).ticks == []
    schedule.refresh_from_db()
    assert schedule.next_tick_at == T0 + timedelta(seconds=10)

    # when the clock passes it, one job; passes again at the same time, none more
    report = schedules_tick(now=T0 + timedelta(seconds=10.4), claimer="a")
    assert report.count(TickOutcome.CREATED) == 1
    ((name, lag),) = report.lags
    assert name == "every10"
    assert lag == pytest.approx(0.4)
    assert schedules_tick(now=T0 + timedelta(seconds=10.5), claimer="b").ticks == []
    job = Job.objects.get()
    assert (
        job.idempotency_key
        == f"schedule:{schedule.pk}:{T0 + timedelta(seconds=10):%Y-%m-%dT%H:%M:%S+00:00}"
    )
    schedule.refresh_from_db()
    assert (schedule.last_job_id, schedule.next_tick_at) == (job.id, T0 + timedelta(seconds=20))


def test_schedules_tick_replayed_tick_creates_no_second_job() -> None:
    # given a tick already claimed with its job
    schedule = _schedule(overlap_policy="allow")
    schedules_tick(now=T0)
    schedules_tick(now=T0 + timedelta(seconds=10))
    # when the schedule is set back to replay that tick (a restarted or second leader)
    Schedule.objects.filter(pk=schedule.pk).update(
        next_tick_at=T0 + timedelta(seconds=10), next_run_at=T0 + timedelta(seconds=10)
    )
    report = schedules_tick(now=T0 + timedelta(seconds=11))
    # then nothing is created: the tick's row is taken
    assert report.ticks == []
    assert Job.objects.count() == 1


@pytest.mark.parametrize(
    ("policy", "jobs", "outcomes"),
    [
        ("catch_up", 2, [(TickOutcome.CAUGHT_UP, 29), (TickOutcome.CREATED, 0)]),
        ("skip", 1, [(TickOutcome.MISSED, 29), (TickOutcome.CREATED, 0)]),
    ],
)
def test_schedules_tick_after_a_five_minute_gap_applies_the_missed_policy_once(
    policy: str, jobs: int, outcomes: list[tuple[str, int]]
) -> None:
    # given a schedule every 10 s whose next tick was 5 minutes ago (no scheduler since)
    schedule = _schedule(missed_policy=policy, overlap_policy="allow")
    schedules_tick(now=T0 - timedelta(seconds=1))
    # when a scheduler passes 5 minutes later (ticks T0 .. T0+5min: 31), 3 s after the last
    report = schedules_tick(now=T0 + timedelta(minutes=5, seconds=3))
    # then the 30 missed ticks make one catch-up job or none; the current tick its own job
    assert Job.objects.count() == jobs
    assert [(o, m) for _, o, m in _ticks(schedule)] == outcomes
    missed = report.count(TickOutcome.MISSED)
    assert missed == (30 if policy == "skip" else 29)
    schedule.refresh_from_db()
    assert schedule.next_tick_at == T0 + timedelta(minutes=5, seconds=10)


def test_schedules_tick_whose_last_tick_is_stale_is_missed_too() -> None:
    schedule = _schedule(missed_policy="skip")
    schedules_tick(now=T0 - timedelta(seconds=1))
    # 2 minutes late for a single tick of a 10-minute schedule: missed, no job
    Schedule.objects.filter(pk=schedule.pk).update(interval_seconds=600)
    report = schedules_tick(now=T0 + timedelta(minutes=2))
    assert Job.objects.count() == 0
    assert report.count(TickOutcome.MISSED) == 1


def test_schedules_tick_overlap_skip_skips_while_the_previous_job_is_live() -> None:
    schedule = _schedule(overlap_policy="skip")
    schedules_tick(now=T0 - timedelta(seconds=1))
    schedules_tick(now=T0)
    # the first tick's job is still running at the next tick: skipped and counted
    Job.objects.update(status=JobStatus.RUNNING)
    report = schedules_tick(now=T0 + timedelta(seconds=10))
    assert report.count(TickOutcome.OVERLAP) == 1
    assert Job.objects.count() == 1
    # once it ended, the next tick runs
    Job.objects.update(status=JobStatus.SUCCEEDED)
    assert schedules_tick(now=T0 + timedelta(seconds=20)).count(TickOutcome.CREATED) == 1
    assert [o for _, o, _ in _ticks(schedule)] == ["created", "overlap", "created"]


def test_schedules_tick_unknown_kind_is_rejected_and_counted() -> None:
    _schedule(kind="no.such.kind")
    schedules_tick(now=T0 - timedelta(seconds=1))
    report = schedules_tick(now=T0)
    assert report.count(TickOutcome.REJECTED) == 1
    assert Job.objects.count() == 0


def test_schedules_tick_disabled_schedule_creates_nothing() -> None:
    _schedule(enabled=False)
    assert schedules_tick(now=T0).ticks == []
    assert schedules_tick(now=T0 + timedelta(minutes=1)).ticks == []


def test_schedules_tick_cron_dst_fall_back_runs_the_repeated_hour_once() -> None:
    # given a daily 01:30 New York schedule, the night 01:00-02:00 happens twice
    schedule = _schedule(interval_seconds=None, cron="30 1 * * *", timezone="America/New_York")
    start = datetime(2026, 11, 1, 4, 0, tzinfo=UTC)  # 00:00 EDT
    schedules_tick(now=start)
    # when the fixed clock walks through the night minute by minute
    for minute in range(0, 4 * 60):
        schedules_tick(now=start + timedelta(minutes=minute, seconds=1))
    # then 01:30 ran once (01:30 EDT = 05:30 UTC), not again at 01:30 EST
    assert [t for t, _, _ in _ticks(schedule)] == [datetime(2026, 11, 1, 5, 30, tzinfo=UTC)]


def test_schedules_tick_targets_a_django_task_by_its_dotted_path() -> None:
    _schedule(kind="example.tasks.send_welcome", payload={"args": [1], "kwargs": {}})
    schedules_tick(now=T0 - timedelta(seconds=1))
    assert schedules_tick(now=T0).count(TickOutcome.CREATED) == 1
    job = Job.objects.get()
    assert (job.kind, job.payload) == ("example.tasks.send_welcome", {"args": [1], "kwargs": {}})


def test_schedules_tick_jitter_delays_the_run_not_the_tick() -> None:
    # given a herd of schedules due at the same second, each with up to 8 s of jitter
    for n in range(20):
        _schedule(name=f"herd-{n}", jitter_seconds=8, overlap_policy="allow")
    schedules_tick(now=T0 - timedelta(seconds=1))
    ticks = {s.next_tick_at for s in Schedule.objects.all()}
    runs = [s.next_run_at for s in Schedule.objects.all() if s.next_run_at is not None]
    # then each run time lies in [tick, tick + 8 s], spread (not all at one second)
    assert ticks == {T0}
    assert len(runs) == 20
    assert all(T0 <= run <= T0 + timedelta(seconds=8) for run in runs)
    assert len({run.replace(microsecond=0) for run in runs}) > 3
    # and at the tick itself only those whose run time has passed are created, under the
    # tick's own time (the idempotency key and the claim use the nominal tick)
    created = schedules_tick(now=T0 + timedelta(seconds=4)).count(TickOutcome.CREATED)
    assert 0 < created < 20
    schedules_tick(now=T0 + timedelta(seconds=8))
    assert set(ScheduleTick.objects.values_list("tick_at", flat=True)) == {T0}
    assert ScheduleTick.objects.count() == Job.objects.count() == 20
