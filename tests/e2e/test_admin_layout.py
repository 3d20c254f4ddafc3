"""The admin read as an operator reads it: the job list at 1280 and 1440 px, the job page's order.

Issue 19, item 6: at 1440 px with Django's navigation sidebar open (its
default) the job list clipped its last columns behind a scroll bar. Here
the list is loaded at 1280 and 1440 px, sidebar open and closed, with jobs
of long kind names, long errors and a waiting reason; every cell must be
inside the list's box and none may hide text sideways. The job page lists
its times in lifecycle order and names each duration for what it measures.
Screenshots: var/test-artifacts/e2e/admin-job-list-<width>-<sidebar>.png.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from devstack.receiver import WebhookReceiver
from devstack.services import free_port
from tests.e2e.conftest import login, shoot
from tests.integration.harness import Platform

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

LIST = "/admin/jobs/job/"
WIDTHS = (1280, 1440)
# The narrowest the error column may get and still show a readable head of the error.
ERROR_MIN_PX = 120

# Every cell and header of the list: its box against the list's, and its text against its box.
_MEASURE = """() => {
  const box = document.querySelector('#changelist .results');
  const right = Math.min(box.getBoundingClientRect().right, window.innerWidth);
  const cells = [...document.querySelectorAll('#result_list th, #result_list td')];
  const outside = cells.filter(c => c.getBoundingClientRect().right > right + 1)
    .map(c => c.className + ': ' + c.innerText.slice(0, 40));
  const clipped = cells.filter(c => c.scrollWidth > c.clientWidth + 1)
    .map(c => c.className + ': ' + c.innerText.slice(0, 40));
  const errors = [...document.querySelectorAll('#result_list td.field-error')]
    .map(c => c.getBoundingClientRect().width);
  return {scroll: box.scrollWidth, client: box.clientWidth, outside, clipped,
          errorWidth: Math.min(...errors), rows: document.querySelectorAll('#result_list tbody tr').length};
}"""


@pytest.fixture(scope="module")
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as server:
        yield server


@pytest.fixture(scope="module")
def jobs(live: Platform, receiver: WebhookReceiver) -> dict[str, str]:
    """Jobs of every shape the list must fit: dead with a long error, a long kind name,
    recovered, and one waiting an hour because its receiver asked (Retry-After)."""
    refused = f"http://127.0.0.1:{free_port()}/hook"
    ids = {
        "refused": live.submit("webhook.deliver", {"url": refused, "body": {"order": 42}}),
        "csv": live.submit("report.csv_summary", {"source": receiver.url("/status/404")}),
        "recovered": live.submit("demo.flaky", {"fail_times": 1}),
        "asked": live.submit(
            "webhook.deliver", {"url": receiver.url("/status/429?retry_after=3600")}
        ),
    }
    for name in ("refused", "csv", "recovered"):
        live.wait_job(ids[name], timeout=60)
    live.wait_job(ids["asked"], statuses=frozenset({"retrying"}), timeout=60)
    return ids


@pytest.mark.timeout(240)
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("sidebar", ["open", "closed"])
def test_admin_job_list_fits_without_clipping(
    browser: Any, live: Platform, jobs: dict[str, str], width: int, sidebar: str
) -> None:
    # given the operator at a window `width` px wide, Django's navigation sidebar open or closed
    context = browser.new_context(viewport={"width": width, "height": 900}, base_url=live.base_url)
    context.set_default_timeout(15_000)
    is_open = "true" if sidebar == "open" else "false"
    context.add_init_script(f"localStorage.setItem('django.admin.navSidebarIsOpen', '{is_open}')")
    page = context.new_page()
    try:
        login(page)
        # when they open the job list
        page.goto(LIST)
        assert page.locator("#nav-sidebar").is_visible() == (sidebar == "open")
        found = page.evaluate(_MEASURE)
        shoot(page, f"admin-job-list-{width}-{sidebar}")

        # then no column is cut off or scrolled away, no cell hides text sideways,
        # and the error column keeps a readable width
        assert found["rows"] >= len(jobs), found
        assert found["scroll"] <= found["client"] + 1, found
        assert found["outside"] == [], found
        assert found["clipped"] == [], found
        assert found["errorWidth"] >= ERROR_MIN_PX, found
        # and the waiting job says why under its status; hovering gives the detail
        why = page.locator(
            f"#result_list tr:has(a:text-is('{jobs['asked'][:8]}')) td.field-status_badge .job-why"
        )
        assert why.inner_text() == "Retry-After"
        assert why.get_attribute("title") == (
            "retry after 60 min 00 s, as the server asked (Retry-After)"
        )
    finally:
        context.close()


def _when(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f")


@pytest.mark.timeout(120)
def test_admin_job_page_times_in_lifecycle_order_and_named_durations(
    page: Any, live: Platform, jobs: dict[str, str]
) -> None:
    # given the refused webhook's page (2 attempts, retried once)
    login(page)
    page.goto(f"{LIST}{jobs['refused']}/change/")

    # then its times read in the order things happened, each named for its attempt
    rows = page.locator("table.job-timeline tr").all_inner_texts()
    labels = [row.split("\t")[0].strip() for row in rows]
    assert labels == [
        "created",
        "first started",
        "enqueued (attempt 2)",
        "published (attempt 2)",
        "started (attempt 2)",
        "finished",
    ], rows
    times = [
        _when(m) for m in re.findall(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}", "\n".join(rows))
    ]
    assert len(times) == len(labels), rows
    assert times == sorted(times), rows
    # and the durations say what they measure: run time, the wait before, the next retry's delay
    attempts = page.locator("table.job-attempts tbody tr")
    assert [attempts.nth(i).locator("td").first.inner_text() for i in range(2)] == ["1", "2"]
    first, second = (attempts.nth(i).inner_text() for i in range(2))
    assert re.search(r"ran \d+\.\d{3} s", first), first
    assert re.search(r"waited \d+\.\d{3} s", first), first
    assert re.search(r"next in \d+\.\d{3} s", first), first
    assert re.search(r"waited \d+\.\d{3} s", second), second
    assert re.search(r"end-to-end\s*\d+\.\d{3} s", page.locator(".job-facts").inner_text())


@pytest.mark.timeout(120)
def test_admin_job_page_says_why_a_job_waits(
    page: Any, live: Platform, jobs: dict[str, str]
) -> None:
    # given a webhook whose receiver answered 429 with Retry-After: 3600
    login(page)
    page.goto(f"{LIST}{jobs['asked']}/change/")

    # then its page says why it waits and until when, as the API does
    box = page.locator(".job-waiting-detail").inner_text()
    api = live.job(jobs["asked"])["waiting"]
    assert api["reason"] == "retry_after"
    assert api["detail"] in box
    assert "next attempt at " in box
    assert "Waiting: Retry-After" in page.locator("h2.job-section").all_inner_texts()
    shoot(page, "admin-job-page-waiting")
