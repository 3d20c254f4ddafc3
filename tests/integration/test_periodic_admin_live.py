"""A schedule created, edited and disabled in the live admin takes effect within one tick,
and each change is in its History (issue 23, Acceptance).

Live processes: gunicorn (the admin), the scheduler (the periodic leader, tick 0.1 s), a
worker; PostgreSQL and Redis. A staff user submits the admin's own forms over HTTP, CSRF
token and all (tests/integration/admin_forms.py). Ticks are read from jobs_scheduletick;
"within one tick" is: the first tick due after a change is the one that shows it (its job
created, with the edit, or none once disabled), and it is due at most one interval after
the change. A change's time is the database's clock once its response came back (a tick due
while the form was being saved may show the state before it).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

from devstack.services import wait_for
from tests.integration.admin_forms import submit
from tests.integration.admin_login import admin_session
from tests.integration.harness import HTTP_TIMEOUT, Platform
from tests.integration.periodic import Tick, database_now, read_ticks

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NAME = "live-admin"
ADD = "/admin/jobs/schedule/add/"
PERMS = ("view_job", "add_schedule", "change_schedule", "view_schedule")


def _ticks_after(platform: Platform, since: datetime) -> list[Tick]:
    return [t for t in read_ticks(platform, NAME) if t.due_at > since]


def _fail_times(platform: Platform, job_id: str | None) -> object:
    """The job's payload's fail_times (the kind fills in its other fields' defaults)."""
    return platform.scalar(
        "SELECT payload -> 'fail_times' FROM jobs_job WHERE id::text = %s", (job_id,)
    )


def _first_job_after(
    platform: Platform, change: datetime, *, within: float, delays: dict[str, float], what: str
) -> Tick:
    """The first tick due after `change` that made a job; asserts it was due within `within`
    seconds of the change and records its job's delay in `delays`."""
    tick: Tick = wait_for(
        lambda: next((t for t in _ticks_after(platform, change) if t.job_id), None),
        timeout=15,
        interval=0.1,
        what=f"a job after the {what}",
    )
    delays[f"{what}: first job after the change"] = (tick.created_at - change).total_seconds()
    assert tick.due_at <= change + timedelta(seconds=within)
    return tick


@pytest.mark.timeout(180)
def test_schedule_created_edited_disabled_in_the_live_admin_within_one_tick_with_history(
    platform_factory: Callable[..., Platform],
) -> None:
    platform = platform_factory("periodic_admin")
    session = admin_session(platform, perms=PERMS)
    delays: dict[str, float] = {}

    # when an operator creates a 3 s interval schedule in the admin
    response = submit(
        session,
        platform.url(ADD),
        {
            "name": NAME,
            "kind": "demo.flaky",
            "payload": '{"fail_times": 0}',
            "queue": "default",
            "interval_seconds": 3,
            "timezone": "UTC",
            "enabled": "on",
        },
        form_id="schedule_form",
    )
    assert response.status_code == 200, response.text[:2000]
    assert "was added successfully" in response.text, response.text[:2000]
    created = database_now(platform)  # saved by now (committed before the response)
    pk = int(platform.scalar("SELECT id FROM jobs_schedule WHERE name = %s", (NAME,)))
    change_url = platform.url(f"/admin/jobs/schedule/{pk}/change/")

    # then its first tick's job is created within one interval of the change
    first = _first_job_after(platform, created, within=3, delays=delays, what="create")
    assert _fail_times(platform, first.job_id) == 0

    # when the operator edits it: every 2 s, another payload
    response = submit(
        session,
        change_url,
        {"interval_seconds": 2, "payload": '{"fail_times": 1}'},
        form_id="schedule_form",
    )
    assert "was changed successfully" in response.text, response.text[:2000]
    edited = database_now(platform)

    # then the first tick due after the edit carries it, due within the new interval
    after_edit = _first_job_after(platform, edited, within=2, delays=delays, what="edit")
    assert _fail_times(platform, after_edit.job_id) == 1

    # when the operator disables it
    response = submit(session, change_url, {"enabled": None}, form_id="schedule_form")
    assert "was changed successfully" in response.text, response.text[:2000]
    disabled = database_now(platform)

    # then no tick is due after the change, for three intervals (what must stay silent)
    quiet_until = time.monotonic() + 3 * 2 + 1
    while time.monotonic() < quiet_until:
        assert _ticks_after(platform, disabled) == [], _ticks_after(platform, disabled)
        time.sleep(0.2)  # sampling the silence, not waiting for an event
    assert platform.scalar("SELECT enabled FROM jobs_schedule WHERE id = %s", (pk,)) is False

    # and the History lists the three changes, each by the operator
    history = session.get(
        platform.url(f"/admin/jobs/schedule/{pk}/history/"), timeout=HTTP_TIMEOUT
    ).text
    table = history[history.index('id="change-history"') :]
    table = table[: table.index("</table>")]
    rows = re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>", 1)[1], flags=re.S)
    actions = [re.sub(r"<[^>]+>|\s+", " ", r).strip() for r in rows]
    print(f"\nadmin schedule changes: {delays}; History: {actions}")
    assert len(actions) == 3, actions
    assert all(" ops " in f" {a} " for a in actions), actions
    assert "Added" in actions[0]
    assert "Interval seconds" in actions[1]
    assert "Payload" in actions[1]
    assert "Enabled" in actions[2]
