"""jobs.retention, manage.py jobs_prune and the jobs.prune kind (on the unit test database)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone
from prometheus_client import REGISTRY

from jobs import retention
from jobs.checks import check_retention
from jobs.kinds import get_kind
from jobs.models import Attempt, Job, JobStatus
from jobs.periodic.models import Schedule, ScheduleTick
from jobs.reasons import TickOutcome
from jobs.services.audit import job_action_record

DAY = timedelta(days=1)
CONFIG = retention.Retention(
    ages={
        JobStatus.SUCCEEDED: 7 * DAY,
        JobStatus.CANCELLED: 14 * DAY,
        JobStatus.DEAD: 30 * DAY,
    },
    keyed_after=10 * DAY,
    batch=2,
    pause=0,
)


def _finished(job_factory: Callable[..., Job], status: str, days_ago: float, **fields: Any) -> Job:
    at = timezone.now() - timedelta(days=days_ago)
    job = job_factory(status=status, finished_at=at, attempts_made=1, **fields)
    Job.objects.filter(pk=job.pk).update(created_at=at - timedelta(seconds=5))
    return job


def _pruned(name: str, status: str, table: str) -> float:
    return REGISTRY.get_sample_value(f"{name}_total", {"status": status, "table": table}) or 0.0


def test_retention_parse_age_reads_units_and_off() -> None:
    assert retention.parse_age("X", "7d") == 7 * DAY
    assert retention.parse_age("X", "36h") == timedelta(hours=36)
    assert retention.parse_age("X", " 1.5 w ") == timedelta(weeks=1.5)
    assert retention.parse_age("X", "OFF") is None
    assert [retention.format_age(retention.parse_age("X", t)) for t in ("7d", "36h", "90m")] == [
        "7d",
        "36h",
        "90m",
    ]
    for bad in ("", "7", "0d", "-1d", "7 days", "soon"):
        with pytest.raises(retention.RetentionError, match="^X is"):
            retention.parse_age("X", bad)


def test_retention_check_refuses_nonsense_in_one_line(settings: Any) -> None:
    assert check_retention(None) == []
    settings.JOBS_PRUNE_DEAD_AFTER = "a month"
    [error] = check_retention(None)
    assert error.id == "jobs.E040"
    assert "JOBS_PRUNE_DEAD_AFTER is 'a month'" in error.msg
    assert "\n" not in error.msg
    settings.JOBS_PRUNE_DEAD_AFTER = "30d"
    settings.JOBS_PRUNE_BATCH = 0
    assert "JOBS_PRUNE_BATCH" in check_retention(None)[0].msg
    settings.JOBS_PRUNE_BATCH = 500
    settings.JOBS_PRUNE_PAUSE_SECONDS = -1
    assert "JOBS_PRUNE_PAUSE_SECONDS" in check_retention(None)[0].msg
    settings.JOBS_PRUNE_PAUSE_SECONDS = 0.05
    for duty in (0, 1.5, -0.1):
        settings.JOBS_PRUNE_DUTY_CYCLE = duty
        [error] = check_retention(None)
        assert error.msg.startswith(f"JOBS_PRUNE_DUTY_CYCLE is {duty}; it must be 0.01..1")
    settings.JOBS_PRUNE_DUTY_CYCLE = 0.4
    settings.JOBS_PRUNE_BATCH_TARGET_MS = 5
    assert "JOBS_PRUNE_BATCH_TARGET_MS is 5" in check_retention(None)[0].msg
    settings.JOBS_PRUNE_BATCH_TARGET_MS = 100
    assert check_retention(None) == []


@pytest.mark.django_db
def test_retention_prunes_old_terminal_jobs_with_their_attempts_and_history(
    job_factory: Callable[..., Job], attempt_factory: Callable[..., Any], user: Any
) -> None:
    # given old and young jobs of every terminal status, live old jobs, attempts, History
    gone = [
        _finished(job_factory, JobStatus.SUCCEEDED, 8),
        _finished(job_factory, JobStatus.SUCCEEDED, 9),
        _finished(job_factory, JobStatus.SUCCEEDED, 20),
        _finished(job_factory, JobStatus.CANCELLED, 15),
        _finished(job_factory, JobStatus.DEAD, 31),
    ]
    kept = [
        _finished(job_factory, JobStatus.SUCCEEDED, 6),
        _finished(job_factory, JobStatus.CANCELLED, 13),
        _finished(job_factory, JobStatus.DEAD, 29),
    ]
    for status in (JobStatus.QUEUED, JobStatus.DELAYED, JobStatus.RUNNING, JobStatus.RETRYING):
        live = job_factory(status=status)
        Job.objects.filter(pk=live.pk).update(created_at=timezone.now() - 100 * DAY)
        kept.append(live)
    for job in gone + kept:
        attempt_factory(job, number=1)
        attempt_factory(job, number=2)
        job_action_record(job=job, actor=user, message="touched")
    before = _pruned("jobs_pruned", "succeeded", "jobs_job")
    before_attempts = _pruned("jobs_pruned", "succeeded", "jobs_attempt")

    # when
    result = retention.prune(retention=CONFIG)

    # then only the old terminal ones went, with everything hanging off them
    assert set(Job.objects.values_list("pk", flat=True)) == {job.pk for job in kept}
    assert Attempt.objects.count() == 2 * len(kept)
    assert LogEntry.objects.count() == len(kept)
    assert result.jobs == {"succeeded": 3, "cancelled": 1, "dead": 1}
    assert result.attempts == {"succeeded": 6, "cancelled": 2, "dead": 2}
    assert result.history == 5
    assert result.batches == 4  # succeeded in batches of 2: 2 + 1; one each for the others
    assert not result.stopped
    assert _pruned("jobs_pruned", "succeeded", "jobs_job") - before == 3
    assert _pruned("jobs_pruned", "succeeded", "jobs_attempt") - before_attempts == 6


@pytest.mark.django_db
def test_retention_rests_by_its_duty_cycle_and_sizes_batches_by_time(
    job_factory: Callable[..., Job], monkeypatch: pytest.MonkeyPatch
) -> None:
    # given 7 old jobs, and a clock on which every batch takes exactly 0.2 s
    for days in range(8, 15):
        _finished(job_factory, JobStatus.SUCCEEDED, days)
    ticks = iter(range(1000))
    monkeypatch.setattr(retention.time, "monotonic", lambda: next(ticks) * 0.1)
    sizes: list[int] = []
    real_delete = retention.delete_batch

    def counted(where: Any, after: Any, size: int) -> Any:
        sizes.append(size)
        next(ticks)  # the batch's own 0.1 s more
        return real_delete(where, after, size)

    monkeypatch.setattr(retention, "delete_batch", counted)
    rests: list[float] = []
    config = retention.Retention(
        ages=CONFIG.ages, keyed_after=None, batch=4, pause=0.01, duty=0.25, target_ms=100
    )

    # when
    result = retention.prune(retention=config, sleep=rests.append)

    # then it rests 3x each batch's time (deletes 1/4 of the time) before the next query,
    # and halves the batches that took twice the 100 ms target
    assert sizes == [4, 2, 1, 1, 1, 1]  # the last three find none: 1 succeeded, cancelled, dead
    assert result.jobs["succeeded"] == 7
    assert result.batches == 3
    assert rests == [pytest.approx(0.6)] * 3
    assert result.busy_seconds == pytest.approx(0.2 * len(sizes))


@pytest.mark.django_db
def test_retention_clears_schedule_references_to_the_jobs_it_deletes(
    job_factory: Callable[..., Job],
) -> None:
    # given an old job that a schedule and one of its ticks point at (SET_NULL foreign keys)
    old = _finished(job_factory, JobStatus.SUCCEEDED, 8)
    young = _finished(job_factory, JobStatus.SUCCEEDED, 1)
    schedule = Schedule.objects.create(
        name="nightly", kind="demo.flaky", interval_seconds=60, last_job=old
    )
    now = timezone.now()
    tick = ScheduleTick.objects.create(
        schedule=schedule,
        tick_at=now,
        due_at=now,
        created_at=now,
        outcome=TickOutcome.CREATED,
        job=old,
    )
    kept = ScheduleTick.objects.create(
        schedule=schedule,
        tick_at=now - DAY,
        due_at=now,
        created_at=now,
        outcome=TickOutcome.CREATED,
        job=young,
    )

    # when
    result = retention.prune(retention=CONFIG)

    # then the job went, the references to it are cleared, the others stay
    assert result.jobs["succeeded"] == 1
    schedule.refresh_from_db()
    tick.refresh_from_db()
    kept.refresh_from_db()
    assert schedule.last_job_id is None
    assert tick.job_id is None
    assert kept.job_id == young.pk


@pytest.mark.django_db
def test_retention_keeps_a_keyed_job_until_its_key_expires(
    job_factory: Callable[..., Job],
) -> None:
    young_key = _finished(job_factory, JobStatus.SUCCEEDED, 8, idempotency_key="order-1")
    old_key = _finished(job_factory, JobStatus.SUCCEEDED, 11, idempotency_key="order-2")

    retention.prune(retention=CONFIG)

    assert list(Job.objects.values_list("pk", flat=True)) == [young_key.pk]
    assert not Job.objects.filter(pk=old_key.pk).exists()
    forever = retention.Retention(ages=CONFIG.ages, keyed_after=None, batch=10, pause=0)
    _finished(job_factory, JobStatus.SUCCEEDED, 400, idempotency_key="order-3")
    assert retention.prune(retention=forever).jobs["succeeded"] == 0


@pytest.mark.django_db
def test_retention_status_off_is_kept_forever(job_factory: Callable[..., Job]) -> None:
    _finished(job_factory, JobStatus.DEAD, 400)
    config = retention.Retention(
        ages={**CONFIG.ages, JobStatus.DEAD: None}, keyed_after=None, batch=10, pause=0
    )
    assert retention.preview(retention=config)["dead"] == (0, 0)
    assert retention.prune(retention=config).jobs["dead"] == 0
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_retention_stops_between_batches_and_the_next_run_carries_on(
    job_factory: Callable[..., Job],
) -> None:
    for days in (8, 9, 10, 11, 12):
        _finished(job_factory, JobStatus.SUCCEEDED, days)
    answers = iter([False, True])

    first = retention.prune(retention=CONFIG, should_stop=lambda: next(answers, True))

    assert first.stopped
    assert first.jobs["succeeded"] == 2
    assert Job.objects.count() == 3
    assert retention.prune(retention=CONFIG).jobs["succeeded"] == 3
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_jobs_prune_dry_run_counts_per_status_and_deletes_nothing(
    job_factory: Callable[..., Job], attempt_factory: Callable[..., Any]
) -> None:
    attempt_factory(_finished(job_factory, JobStatus.SUCCEEDED, 8), number=1)
    _finished(job_factory, JobStatus.DEAD, 31)
    out = StringIO()

    call_command("jobs_prune", "--dry-run", stdout=out)

    text = out.getvalue()
    assert "succeeded (older than 7d): 1 jobs, 1 attempts would go" in text
    assert "dead (older than 30d): 1 jobs, 0 attempts would go" in text
    assert "dry run: nothing deleted" in text
    assert Job.objects.count() == 2
    out = StringIO()
    call_command("jobs_prune", "--dry-run", "--json", stdout=out)
    assert json.loads(out.getvalue())["succeeded"] == {"jobs": 1, "attempts": 1}


@pytest.mark.django_db
def test_jobs_prune_deletes_and_reports_counts(job_factory: Callable[..., Job]) -> None:
    _finished(job_factory, JobStatus.SUCCEEDED, 8)
    _finished(job_factory, JobStatus.CANCELLED, 15)
    out = StringIO()

    call_command("jobs_prune", "--pause", "0", stdout=out)

    assert "succeeded: 1 jobs, 0 attempts" in out.getvalue()
    assert "pruned 2 jobs in 2 batches" in out.getvalue()
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--batch", "0"], "--batch must be 1..10000 jobs"),
        (["--pause", "-1"], "--pause must be 0..60 seconds"),
        (["--duty", "0"], "--duty must be 0.01..1"),
        (["--max-seconds", "0"], "--max-seconds must be above 0"),
    ],
)
def test_jobs_prune_refuses_bad_options_in_one_line(option: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=f"^{message}$"):
        call_command("jobs_prune", *option)


@pytest.mark.django_db
def test_prune_kind_prunes_and_returns_the_counts(
    job_factory: Callable[..., Job], attempt_context: Callable[..., Any], settings: Any
) -> None:
    settings.JOBS_PRUNE_PAUSE_SECONDS = 0
    _finished(job_factory, JobStatus.SUCCEEDED, 8)
    kind = get_kind("jobs.prune")

    result = kind.run(kind.validate_payload({}), attempt_context(soft_in=60))

    assert result["jobs"]["succeeded"] == 1
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_prune_kind_stops_near_its_soft_limit(
    job_factory: Callable[..., Job], attempt_context: Callable[..., Any]
) -> None:
    _finished(job_factory, JobStatus.SUCCEEDED, 8)
    kind = get_kind("jobs.prune")

    result = kind.run({}, attempt_context(soft_in=1))

    assert result["stopped"] is True
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_prune_kind_never_rests_past_its_stop_margin(
    attempt_context: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a run 0.3 s from its margin (5 s before the soft limit), asked to rest 60 s
    rested: list[float] = []

    def fake_prune(**kwargs: Any) -> retention.PruneResult:
        began = time.monotonic()
        kwargs["sleep"](60.0)
        rested.append(time.monotonic() - began)
        return retention.PruneResult()

    monkeypatch.setattr(retention, "prune", fake_prune)
    kind = get_kind("jobs.prune")

    kind.run({}, attempt_context(soft_in=5.3))

    # then the rest ended at the margin, not a minute later
    assert rested[0] < 2.0
