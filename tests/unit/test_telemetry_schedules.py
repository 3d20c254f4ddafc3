"""jobs.telemetry.schedules: tick counters and lag from a pass's report; the overdue gauge."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client import REGISTRY, CollectorRegistry

from jobs.models import Schedule
from jobs.periodic.ticks import TickReport
from jobs.reasons import TickOutcome
from jobs.telemetry.schedules import ScheduleOverdueCollector, record


def _sample(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_record_counts_ticks_by_outcome_and_observes_lag() -> None:
    labels = {"schedule": "telemetry-test", "outcome": "missed"}
    before = _sample("jobs_schedule_ticks_total", labels)
    lags_before = _sample("jobs_schedule_lag_seconds_count", {"schedule": "telemetry-test"})
    report = TickReport(
        ticks=[
            ("telemetry-test", TickOutcome.CAUGHT_UP, 1),
            ("telemetry-test", TickOutcome.MISSED, 29),
            ("telemetry-test", TickOutcome.CREATED, 1),
        ],
        lags=[("telemetry-test", 0.3)],
    )
    record(report)
    assert _sample("jobs_schedule_ticks_total", labels) - before == 29
    for outcome in TickOutcome:  # every outcome's series exists, at 0 or more
        assert (
            REGISTRY.get_sample_value(
                "jobs_schedule_ticks_total", {"schedule": "telemetry-test", "outcome": outcome}
            )
            is not None
        )
    after = _sample("jobs_schedule_lag_seconds_count", {"schedule": "telemetry-test"})
    assert after - lags_before == 1


@pytest.mark.django_db
def test_overdue_collector_reports_seconds_past_due_of_enabled_schedules() -> None:
    now = timezone.now()
    Schedule.objects.create(
        name="late", kind="demo.flaky", interval_seconds=10, next_run_at=now - timedelta(minutes=2)
    )
    Schedule.objects.create(
        name="fine", kind="demo.flaky", interval_seconds=10, next_run_at=now + timedelta(seconds=5)
    )
    Schedule.objects.create(name="off", kind="demo.flaky", interval_seconds=10, enabled=False)
    registry = CollectorRegistry()
    registry.register(ScheduleOverdueCollector())
    late = registry.get_sample_value("jobs_schedule_overdue_seconds", {"schedule": "late"})
    assert late is not None
    assert 119 < late < 180
    assert registry.get_sample_value("jobs_schedule_overdue_seconds", {"schedule": "fine"}) == 0
    assert registry.get_sample_value("jobs_schedule_overdue_seconds", {"schedule": "off"}) is None
