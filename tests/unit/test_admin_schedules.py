"""Schedules in the admin: created, edited and disabled take effect within one tick; History."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.contrib.auth.models import User
from django.test import Client

from jobs.models import Job, Schedule, ScheduleSource
from jobs.periodic.ticks import schedules_tick

pytestmark = pytest.mark.django_db
ADD = "/admin/jobs/schedule/add/"
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _form(**fields: Any) -> dict[str, Any]:
    data = {
        "name": "report",
        "kind": "demo.flaky",
        "payload": '{"fail_times": 0}',
        "queue": "",
        "cron": "",
        "timezone": "UTC",
        "interval_seconds": "10",
        "enabled": "on",
        "missed_policy": "catch_up",
        "overlap_policy": "allow",
        "jitter_seconds": "0",
        "ticks-TOTAL_FORMS": "0",
        "ticks-INITIAL_FORMS": "0",
        "ticks-MIN_NUM_FORMS": "0",
        "ticks-MAX_NUM_FORMS": "0",
    }
    data.update(fields)
    return {k: v for k, v in data.items() if v is not None}


@pytest.fixture
def operator(client: Client) -> User:
    user = User.objects.create_superuser("operator", password="pw")
    client.force_login(user)
    return user


def test_admin_schedule_created_edited_disabled_take_effect_within_one_tick(
    client: Client, operator: User
) -> None:
    # when an operator creates a schedule every 10 s
    response = client.post(ADD, _form())
    assert response.status_code == 302, response.content[:2000]
    schedule = Schedule.objects.get(name="report")
    assert schedule.source == ScheduleSource.ADMIN
    # then the leader plans it at its next pass and creates the next tick's job
    schedules_tick(now=T0 + timedelta(seconds=1))
    assert schedules_tick(now=T0 + timedelta(seconds=10)).lags
    assert Job.objects.count() == 1

    # when it is edited to every 60 s: the next tick follows the new timing at once
    change = f"/admin/jobs/schedule/{schedule.pk}/change/"
    assert client.post(change, _form(interval_seconds="60")).status_code == 302
    schedules_tick(now=T0 + timedelta(seconds=11))
    schedule.refresh_from_db()
    assert schedule.next_tick_at == T0 + timedelta(seconds=60)
    schedules_tick(now=T0 + timedelta(seconds=20))
    assert Job.objects.count() == 1
    schedules_tick(now=T0 + timedelta(seconds=60))
    assert Job.objects.count() == 2

    # when it is disabled: no tick after
    assert client.post(change, _form(interval_seconds="60", enabled=None)).status_code == 302
    schedules_tick(now=T0 + timedelta(seconds=120))
    schedules_tick(now=T0 + timedelta(seconds=180))
    assert Job.objects.count() == 2

    # and each change is in the schedule's History
    entries = LogEntry.objects.filter(object_id=str(schedule.pk)).order_by("action_time")
    assert [e.action_flag for e in entries] == [ADDITION, CHANGE, CHANGE]
    assert "Interval seconds" in entries[1].get_change_message()
    assert "Enabled" in entries[2].get_change_message()
    history = client.get(f"/admin/jobs/schedule/{schedule.pk}/history/")
    assert history.status_code == 200
    assert b"Enabled" in history.content


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"kind": "no.such"}, b"no.such"),
        ({"cron": "61 * * * *", "interval_seconds": ""}, b"cron expression"),
        ({"cron": "* * * * *"}, b"not both"),
        ({"cron": "* * * * *", "interval_seconds": "", "timezone": "Mars/X"}, b"unknown time zone"),
    ],
)
def test_admin_schedule_form_refuses_bad_input_with_one_line(
    client: Client, operator: User, fields: dict[str, str], message: bytes
) -> None:
    response = client.post(ADD, _form(**fields))
    assert response.status_code == 200
    assert message in response.content
    assert not Schedule.objects.exists()


def test_admin_code_declared_schedule_is_read_only(client: Client, operator: User) -> None:
    schedule = Schedule.objects.create(
        name="code", kind="demo.flaky", interval_seconds=10, source=ScheduleSource.CODE
    )
    page = client.get(f"/admin/jobs/schedule/{schedule.pk}/change/")
    assert page.status_code == 200
    assert b'name="interval_seconds"' not in page.content
    client.post(f"/admin/jobs/schedule/{schedule.pk}/change/", _form(interval_seconds="60"))
    schedule.refresh_from_db()
    assert schedule.interval_seconds == 10
    assert client.get(f"/admin/jobs/schedule/{schedule.pk}/delete/").status_code == 403


def test_admin_schedule_list_shows_last_job_status_with_a_link(
    client: Client, operator: User
) -> None:
    schedule = Schedule.objects.create(name="s", kind="demo.flaky", interval_seconds=10)
    schedules_tick(now=T0)
    schedules_tick(now=T0 + timedelta(seconds=10))
    schedule.refresh_from_db()
    page = client.get("/admin/jobs/schedule/")
    assert f"/admin/jobs/job/{schedule.last_job_id}/change/".encode() in page.content


def test_admin_overview_lists_schedules_with_next_run_and_last_job(
    client: Client, operator: User
) -> None:
    schedule = Schedule.objects.create(name="nightly-report", kind="demo.flaky", cron="0 3 * * *")
    Schedule.objects.create(name="old", kind="demo.flaky", interval_seconds=5, enabled=False)
    schedules_tick(now=T0)
    schedules_tick(now=T0 + timedelta(hours=15))
    schedule.refresh_from_db()
    page = client.get("/admin/jobs/job/overview/").content.decode()
    assert 'id="schedules"' in page
    assert "nightly-report" in page
    assert "0 3 * * * (UTC)" in page
    assert "old</a> (disabled)" in page
    assert f"/admin/jobs/job/{schedule.last_job_id}/change/" in page
    assert "2026-01-02 03:00:00" in page  # the next run
