"""The admin in a real browser against a live platform with real workers (issue 10 acceptance).

Also pause and the fuse from the admin (issue 24): an operator pauses a kind and trips a
destination's fuse through the admin's forms, sees the held job say why it waits, resumes
and resets with the list actions, and finds each change, with their name, in the History.

One platform for the module (tests/e2e/conftest.py); the jobs every test
looks at are submitted once and driven to their states by the workers.
Screenshots: var/test-artifacts/e2e/.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from devstack.services import free_port, wait_for
from tests.e2e.conftest import PARKED_QUEUE, STAFF_USER, login, shoot
from tests.integration.harness import Platform

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

LIST = "/admin/jobs/job/"
MS_TIME = re.compile(r"\d{2}:\d{2}:\d{2}\.\d{3}")


@pytest.fixture(scope="module")
def jobs(live: Platform) -> dict[str, str]:
    """Jobs in known states: two dead ones (a refused webhook, an always-failing job), one dead
    job that will succeed when requeued, one that succeeded after a failure, one parked."""
    refused = f"http://127.0.0.1:{free_port()}/hook"
    ids = {
        "webhook": live.submit("webhook.deliver", {"url": refused, "body": {"order": 42}}),
        "always": live.submit("demo.flaky", {"fail_times": 10_000}),
        # 3 attempts allowed (E2E_POLICIES): dead after 3 failures, succeeds at attempt 4.
        "recovers": live.submit("demo.flaky", {"fail_times": 3}),
        "succeeded": live.submit("demo.flaky", {"fail_times": 1}),
        "parked": live.submit("demo.flaky", {"fail_times": 0}, queue=PARKED_QUEUE),
    }
    for name in ("webhook", "always", "recovers", "succeeded"):
        live.wait_job(ids[name], timeout=60)
    assert live.job(ids["recovers"])["status"] == "dead"
    return ids


def _short(job_id: str) -> str:
    return job_id[:8]


def _status_on_page(page: Any) -> str:
    return page.locator(".job-facts .job-status").inner_text().strip()


@pytest.mark.timeout(180)
def test_admin_staff_logs_in_and_filters_dead_jobs(
    page: Any, live: Platform, jobs: dict[str, str]
) -> None:
    # given the operator logged in, on the job list
    login(page)
    page.goto(LIST)

    # when they click the "Dead" status filter
    page.locator("#changelist-filter a", has_text=re.compile(r"^Dead$")).first.click()
    page.wait_for_url(re.compile(r"status__exact=dead"))

    # then only dead jobs are listed, the three dead ones among them, coloured red
    # (the badge; the dead reason is on the line under it)
    statuses = page.locator("#result_list td.field-status_badge .job-status").all_inner_texts()
    assert statuses
    assert set(statuses) == {"dead"}
    ids = page.locator("#result_list th.field-short_id").all_inner_texts()
    assert {_short(jobs[n]) for n in ("webhook", "always", "recovers")} <= set(ids)
    colour = page.locator("td.field-status_badge .job-status").first.evaluate(
        "e => getComputedStyle(e).backgroundColor"
    )
    assert colour == "rgb(198, 40, 40)"
    reasons = page.locator("#result_list td.field-status_badge .job-why").all_inner_texts()
    assert set(reasons) == {"exhausted"}
    shoot(page, "admin-job-list-dead")


@pytest.mark.timeout(120)
def test_admin_search_finds_jobs_by_error_text(
    page: Any, live: Platform, jobs: dict[str, str]
) -> None:
    login(page)
    page.goto(LIST)

    # when the operator searches for the refused webhook's error text
    page.fill("#searchbar", "Connection refused")
    page.press("#searchbar", "Enter")
    page.wait_for_url(re.compile(r"q=Connection"))

    # then the webhook job is found, the always-failing one is not
    ids = page.locator("#result_list th.field-short_id").all_inner_texts()
    assert _short(jobs["webhook"]) in ids
    assert _short(jobs["always"]) not in ids
    cell = page.locator(
        f"#result_list tr:has(a:text-is('{_short(jobs['webhook'])}')) td.field-error"
    )
    assert cell.inner_text().startswith("RetryableError: connection error")
    assert "Connection refused" in cell.locator("span").get_attribute("title")
    shoot(page, "admin-job-list-search")


@pytest.mark.timeout(120)
def test_admin_job_page_shows_attempts_and_expands_a_traceback(
    page: Any, live: Platform, jobs: dict[str, str]
) -> None:
    # given the refused webhook's page (2 attempts, both failed)
    login(page)
    page.goto(f"{LIST}{jobs['webhook']}/change/")

    # then times are shown to the millisecond, RSS in MiB, the wait between attempts, no Save
    # (the times are in the timeline under the facts, in lifecycle order: test_admin_layout.py)
    facts = page.locator("table.job-timeline").inner_text()
    assert MS_TIME.search(facts), facts
    rows = page.locator("table.job-attempts tbody tr")
    assert rows.count() == 2
    second = rows.nth(1).inner_text()
    assert "MiB" in second, second
    assert re.search(r"\d\.\d{3} s", second), second
    assert page.locator("input[name=_save]").count() == 0
    assert '"order": 42' in page.locator("pre.job-payload").inner_text()
    # and the table fits the page
    overflow = page.evaluate(
        "() => document.querySelector('table.job-attempts').scrollWidth"
        " <= document.querySelector('#content-main').clientWidth + 1"
    )
    assert overflow

    # when the operator expands the first attempt's traceback
    traceback = page.locator("table.job-attempts pre.traceback").first
    assert not traceback.is_visible()
    page.locator("table.job-attempts details.traceback summary").first.click()

    # then the stored traceback is shown
    assert traceback.is_visible()
    text = traceback.inner_text()
    assert "Traceback (most recent call last)" in text
    assert "Connection refused" in text
    shoot(page, "admin-job-page")


@pytest.mark.timeout(180)
def test_admin_requeue_from_job_page_succeeds_and_shows_in_history(
    page: Any, live: Platform, jobs: dict[str, str]
) -> None:
    # given a job dead after 3 of 3 attempts, which succeeds at its 4th
    login(page)
    url = f"{LIST}{jobs['recovers']}/change/"
    page.goto(url)
    form = page.locator("form.job-action-requeue")
    assert "max attempts 3 → 4" in form.inner_text()

    # when the operator requeues it from its page
    form.locator("input[type=submit]").click()
    page.wait_for_url(f"**{url}")
    assert "Requeue" in page.locator("ul.messagelist").inner_text()

    # then the workers run it to success, as the page shows after a reload
    live.wait_job(jobs["recovers"], statuses=frozenset({"succeeded"}), timeout=60)
    page.reload()
    assert _status_on_page(page) == "succeeded"
    assert page.locator("table.job-attempts tbody tr").count() == 4
    assert "attempts4 of 4" in page.locator(".job-facts").inner_text().replace("\n", "")

    # and its History says who requeued it and what happened to the budget
    page.locator("a.historylink").click()
    history = page.locator("#change-history").inner_text()
    assert STAFF_USER in history
    assert "Requeued via admin: dead (exhausted) → queued" in history
    assert "max attempts 3 → 4" in history
    shoot(page, "admin-job-history")


@pytest.mark.timeout(120)
def test_admin_cancel_queued_job_from_its_page(
    page: Any, live: Platform, jobs: dict[str, str]
) -> None:
    # given a job that stays queued (no worker consumes its queue)
    login(page)
    url = f"{LIST}{jobs['parked']}/change/"
    page.goto(url)
    assert _status_on_page(page) == "queued"
    assert page.locator("form.job-action-requeue").count() == 0

    # when the operator cancels it
    page.locator("form.job-action-cancel input[type=submit]").click()
    page.wait_for_url(f"**{url}")

    # then it is cancelled, in the page and the API, with no action left to offer
    assert _status_on_page(page) == "cancelled"
    assert page.locator(".job-actions form").count() == 0
    assert live.job(jobs["parked"])["status"] == "cancelled"


@pytest.mark.timeout(120)
def test_admin_overview_draws_its_charts(page: Any, live: Platform, jobs: dict[str, str]) -> None:
    login(page)

    # when the overview is open and the worker has reported its children (every second)
    # (children recycle after 4 attempts, counted by the worker in its metrics)
    recycled = "svg[data-chart=recycles] rect[data-label=max_tasks]"

    def reported() -> bool:
        page.goto(f"{LIST}overview/")
        return (
            page.locator("svg[data-chart=worker-rss] rect.bar").count() >= 2
            and float(page.locator(recycled).get_attribute("data-value")) >= 1
        )

    wait_for(reported, timeout=30, interval=0.5, what="worker report with recycles on the overview")

    # then every chart is drawn: attempts per kind with retries, RSS against the limit, dead jobs
    assert page.locator("svg[data-chart='attempts-demo.flaky'] rect.bar.first").count() >= 1
    assert page.locator("svg[data-chart='attempts-demo.flaky'] rect.bar.retry").count() >= 1
    assert page.locator("svg[data-chart=worker-rss] line.limit").count() >= 2
    assert page.locator("svg[data-chart=dead-reasons] rect.bar").count() >= 1
    box = page.locator("svg[data-chart=worker-rss]").bounding_box()
    assert box
    assert box["width"] > 100
    assert box["height"] > 10
    counts = page.locator("#status-counts").inner_text()
    assert "dead" in counts
    assert "succeeded" in counts
    assert page.locator("a", has_text="Flower").get_attribute("href") == "http://127.0.0.1:5555/"
    shoot(page, "admin-overview")


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
