"""Schedules declared in code: synced to rows by the leader; a bad one refuses to start (E031)."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.models import Schedule, ScheduleSource
from jobs.periodic import declared
from jobs.periodic.checks import check_declared_schedules
from jobs.periodic.declared import schedules_sync

pytestmark = pytest.mark.django_db


def test_schedules_sync_creates_updates_and_disables_code_rows(
    settings: Any, monkeypatch: Any
) -> None:
    # settings' schedules alone (the shipped defaults are the next test's)
    monkeypatch.setattr(declared, "DEFAULT_SCHEDULES", {})
    settings.JOBS_SCHEDULES = {
        "nightly": {"kind": "demo.flaky", "cron": "0 3 * * *", "timezone": "Europe/Riga"},
        "often": {"task": "example.tasks.send_welcome", "args": [1], "every": 30, "missed": "skip"},
    }
    assert schedules_sync() == 2
    often = Schedule.objects.get(name="often")
    assert often.source == ScheduleSource.CODE
    assert (often.kind, often.payload) == (
        "example.tasks.send_welcome",
        {"args": [1], "kwargs": {}},
    )
    assert (often.interval_seconds, often.missed_policy) == (30, "skip")
    assert schedules_sync() == 0

    # an edit in code replans the next tick; an entry removed from code is disabled, not deleted
    Schedule.objects.filter(name="nightly").update(next_tick_at="2026-01-01T03:00Z")
    settings.JOBS_SCHEDULES = {"nightly": {"kind": "demo.flaky", "cron": "0 4 * * *"}}
    assert schedules_sync() == 2
    nightly = Schedule.objects.get(name="nightly")
    assert (nightly.cron, nightly.timezone, nightly.next_tick_at) == ("0 4 * * *", "UTC", None)
    assert Schedule.objects.get(name="often").enabled is False


def test_schedules_sync_merges_settings_over_a_default(settings: Any, monkeypatch: Any) -> None:
    monkeypatch.setitem(
        declared.DEFAULT_SCHEDULES, "jobs.prune", {"kind": "demo.flaky", "cron": "17 3 * * *"}
    )
    settings.JOBS_SCHEDULES = {"jobs.prune": {"enabled": False}}
    schedules_sync()
    row = Schedule.objects.get(name="jobs.prune")
    assert (row.cron, row.enabled) == ("17 3 * * *", False)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"kind": "no.such", "every": 5}, "no.such"),
        ({"kind": "demo.flaky"}, "either a cron expression or an interval"),
        ({"kind": "demo.flaky", "every": 5, "task": "x"}, "exactly one of 'kind' and 'task'"),
        ({"kind": "demo.flaky", "cron": "* * *"}, "cron expression"),
        ({"kind": "demo.flaky", "every": 5, "missed": "burst"}, "missed must be one of"),
        ({"kind": "demo.flaky", "every": 5, "colour": "red"}, "unknown keys"),
    ],
)
def test_check_declared_schedules_names_the_problem(
    settings: Any, spec: dict[str, Any], message: str
) -> None:
    settings.JOBS_SCHEDULES = {"bad": spec}
    errors = check_declared_schedules(None)
    assert [e.id for e in errors] == ["jobs.E031"]
    assert message in errors[0].msg
    assert "'bad'" in errors[0].msg
