"""Pause and the fuse from the admin in a real browser, against a live platform (issue 24).

An operator pauses a kind and trips a destination's fuse through the admin's
forms, sees the held job say why it waits, resumes and resets with the list
actions, and finds each change, with their name, in the row's History.
One platform for the module (tests/e2e/conftest.py). Screenshots:
var/test-artifacts/e2e/.
"""

from __future__ import annotations

from typing import Any

import pytest

from devstack.services import free_port, wait_for
from tests.e2e.conftest import STAFF_USER, login, shoot
from tests.integration.harness import Platform

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

JOB_PAGE = "/admin/jobs/job/{}/change/"


def _waiting(live: Platform, job_id: str) -> str | None:
    return (live.job(job_id).get("waiting") or {}).get("reason")


def _run_action(page: Any, row_text: str, action: str) -> None:
    """Tick the changelist row containing `row_text` and run `action` on it."""
    page.locator("#result_list tbody tr", has_text=row_text).locator("input.action-select").check()
    page.select_option("select[name=action]", action)
    page.locator("button[name=index]").click()
    page.wait_for_selector("ul.messagelist")


def _history(page: Any, model: str, pk: int) -> str:
    page.goto(f"/admin/jobs/{model}/{pk}/history/")
    return str(page.locator("#change-history").inner_text())


@pytest.mark.timeout(180)
def test_admin_pauses_a_kind_its_job_waits_and_resume_runs_it(page: Any, live: Platform) -> None:
    # given an operator who pauses demo.sleep from the admin's form
    login(page)
    page.goto("/admin/jobs/pause/add/")
    page.select_option("#id_scope", "kind")
    page.fill("#id_name", "demo.sleep")
    page.fill("#id_reason", "partner maintenance")
    page.locator("input[name=_save]").click()
    page.wait_for_url("**/admin/jobs/pause/")
    row = page.locator("#result_list tbody tr", has_text="demo.sleep").inner_text()
    assert STAFF_USER in row
    assert "partner maintenance" in row

    # when a job of that kind is submitted
    job_id = live.submit("demo.sleep", {"seconds": 0.1})

    # then it waits, paused, and its page says so
    wait_for(lambda: _waiting(live, job_id) == "paused", timeout=30, what="job waits: paused")
    page.goto(JOB_PAGE.format(job_id))
    assert "paused" in page.locator(".job-waiting-detail").inner_text()
    shoot(page, "admin-job-paused")
    assert live.job(job_id)["status"] == "queued"
    pk = int(live.scalar("SELECT id FROM jobs_pause WHERE name = 'demo.sleep'"))
    assert STAFF_USER in _history(page, "pause", pk)

    # when the operator resumes it with the list's action
    page.goto("/admin/jobs/pause/")
    _run_action(page, "demo.sleep", "resume_action")
    assert "Resumed: kind demo.sleep." in page.locator("ul.messagelist").inner_text()

    # then the pause is gone and the job runs to success
    assert page.locator("#result_list tbody tr", has_text="demo.sleep").count() == 0
    job = live.wait_job(job_id, timeout=60)
    assert job["status"] == "succeeded", job


@pytest.mark.timeout(180)
def test_admin_trips_a_destinations_fuse_and_reset_releases_its_job(
    page: Any, live: Platform
) -> None:
    # given an operator who trips the fuse of one webhook destination from the admin's form
    destination = f"127.0.0.1:{free_port()}"
    login(page)
    page.goto("/admin/jobs/fuse/add/")
    page.fill("#id_kind", "webhook.deliver")
    page.fill("#id_destination", destination)
    page.fill("#id_reason", "partner down")
    page.locator("input[name=_save]").click()
    page.wait_for_url("**/admin/jobs/fuse/")
    row = page.locator("#result_list tbody tr", has_text=destination).inner_text()
    assert "open" in row, row
    assert STAFF_USER in row, row
    shoot(page, "admin-fuse-list")

    # when a webhook to that destination is submitted
    job_id = live.submit("webhook.deliver", {"url": f"http://{destination}/hook", "body": {}})

    # then it waits for the open fuse, starts no attempt, and its page says why
    wait_for(lambda: _waiting(live, job_id) == "fuse_open", timeout=30, what="job waits: fuse")
    page.goto(JOB_PAGE.format(job_id))
    assert destination in page.locator(".job-waiting-detail").inner_text()
    assert live.job(job_id)["attempts"] == []

    # when the operator resets it with the list's action
    page.goto("/admin/jobs/fuse/")
    _run_action(page, destination, "reset_action")
    assert "Reset: webhook.deliver " + destination in page.locator("ul.messagelist").inner_text()

    # then the job is released and attempts its delivery (refused: nobody listens there)
    wait_for(lambda: live.job(job_id)["attempts"], timeout=30, what="an attempt after the reset")
    # and the fuse's History names the operator for the trip and the reset
    pk = int(
        live.scalar(
            "SELECT id FROM jobs_fuse WHERE kind = 'webhook.deliver' AND destination = %s",
            (destination,),
        )
    )
    history = _history(page, "fuse", pk)
    assert history.count(STAFF_USER) >= 2, history
    assert "Tripped via admin" in history, history
    assert "Reset via admin" in history, history
