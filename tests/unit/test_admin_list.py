"""The job list: columns, bounded search, filters without queries, bounded query count."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from jobs.admin.listing import search_jobs
from jobs.models import DeadReason, Job, JobStatus

LIST = "/admin/jobs/job/"


@pytest.fixture
def admin_client(client: Client, db: None) -> Client:
    client.force_login(User.objects.create_superuser("root", "root@localhost", "pw"))
    return client


@pytest.fixture
def three(job_factory: Callable[..., Any]) -> dict[str, Job]:
    return {
        "webhook": job_factory(
            kind="webhook.deliver",
            status=JobStatus.DEAD,
            dead_reason=DeadReason.EXHAUSTED,
            idempotency_key="order-42",
            last_error="RetryableError: connection error: [Errno 111] Connection refused",
        ),
        "flaky": job_factory(status=JobStatus.RETRYING, last_error="RetryableError: planned"),
        "recovered": job_factory(
            status=JobStatus.SUCCEEDED, attempts_made=2, last_error="RetryableError: blip"
        ),
    }


@pytest.mark.parametrize(
    ("term", "expected"),
    [
        ("connection REFUSED", {"webhook"}),  # error text, any case
        ("webhook", {"webhook"}),  # kind
        ("order-42", {"webhook"}),  # idempotency key
        ("RetryableError", {"webhook", "flaky", "recovered"}),
        ("no such text", set()),
    ],
)
def test_search_jobs_by_error_kind_and_key(
    three: dict[str, Job], term: str, expected: set[str]
) -> None:
    found = set(search_jobs(Job.objects.all(), term).values_list("id", flat=True))

    assert found == {three[name].id for name in expected}


def test_search_jobs_by_short_and_full_id(three: dict[str, Job]) -> None:
    job = three["flaky"]

    for term in (str(job.id)[:8], str(job.id), str(job.id).upper()):
        assert job in search_jobs(Job.objects.all(), term), term


def test_admin_list_columns_and_recovered_error(
    admin_client: Client, three: dict[str, Job]
) -> None:
    html = admin_client.get(LIST).content.decode()

    assert str(three["webhook"].id)[:8] in html
    assert 'class="job-status job-status-dead"' in html
    assert "0 / 5" in html
    assert "recovered: RetryableError: blip" in html


def test_admin_list_query_count_does_not_grow_with_rows(
    admin_client: Client, job_factory: Callable[..., Any]
) -> None:
    # given 3 jobs, then 60 (more than a page)
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(LIST, {"status__exact": "queued"}).status_code == 200
        return len(captured)

    for _ in range(3):
        job_factory()
    few = queries()
    for _ in range(57):
        job_factory()

    # then the list costs the same number of queries, and few
    assert queries() == few
    assert few <= 8


def test_admin_search_page_finds_error_text(admin_client: Client, three: dict[str, Job]) -> None:
    html = admin_client.get(LIST, {"q": "Connection refused"}).content.decode()

    assert str(three["webhook"].id)[:8] in html
    assert str(three["flaky"].id)[:8] not in html


def test_admin_date_hierarchy_needs_no_distinct_scan(
    admin_client: Client, three: dict[str, Job]
) -> None:
    with CaptureQueriesContext(connection) as captured:
        html = admin_client.get(LIST).content.decode()

    assert 'class="toplinks"' in html
    assert not any("DISTINCT" in q["sql"].upper() for q in captured.captured_queries)


def test_admin_date_hierarchy_drills_down_by_year_and_month(
    admin_client: Client, three: dict[str, Job]
) -> None:
    created = three["webhook"].created_at

    by_year = admin_client.get(LIST, {"created_at__year": created.year})
    by_month = admin_client.get(
        LIST, {"created_at__year": created.year, "created_at__month": created.month}
    )

    assert by_year.status_code == by_month.status_code == 200
    assert f"created_at__month={created.month}" in by_year.content.decode()
    assert f"created_at__day={created.day}" in by_month.content.decode()


def test_admin_action_on_unknown_job_is_404(admin_client: Client) -> None:

    for job_id in ("not-a-uuid", "00000000-0000-0000-0000-000000000000"):
        response = admin_client.post(reverse("admin:jobs_job_act", args=[job_id, "cancel"]))
        assert response.status_code == 404, job_id
