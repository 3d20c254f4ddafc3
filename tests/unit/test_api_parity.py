"""API parity with the admin: tracebacks, trace id, queue filter, ordering, page size, strict query."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from jobs.models import JobStatus

JOBS_URL = "/api/jobs/"
TRACE = "0af7651916cd43dd8448eb211c80319c"


def _fields(response: Any) -> list[str]:
    body = response.json()
    assert set(body) == {"detail", "errors"}, body
    return [e["field"] for e in body["errors"]]


def test_api_detail_has_tracebacks_and_trace_id(
    api_client: APIClient, job_factory: Callable[..., Any], attempt_factory: Callable[..., Any]
) -> None:
    job = job_factory(status=JobStatus.RETRYING, trace_parent=f"00-{TRACE}-b7ad6b7169203331-01")
    attempt_factory(job, number=1, outcome="error", traceback="Traceback (most recent call last):")

    body = api_client.get(f"{JOBS_URL}{job.id}/").json()

    assert body["trace_id"] == TRACE
    assert body["attempts"][0]["traceback"] == "Traceback (most recent call last):"


def test_api_succeeded_job_reports_earlier_error_as_recovered(
    api_client: APIClient, job_factory: Callable[..., Any]
) -> None:
    # given a job that succeeded at attempt 2 after a failed attempt 1
    job = job_factory(status=JobStatus.SUCCEEDED, attempts_made=2, last_error="RetryableError: x")
    failing = job_factory(status=JobStatus.RETRYING, last_error="RetryableError: y")

    # then its last_error is empty and the earlier error is named as recovered, in detail and list
    detail = api_client.get(f"{JOBS_URL}{job.id}/").json()
    assert (detail["last_error"], detail["recovered_error"]) == ("", "RetryableError: x")
    listed = {j["id"]: j for j in api_client.get(JOBS_URL).json()["results"]}
    assert listed[str(job.id)]["recovered_error"] == "RetryableError: x"
    # and a job still failing shows its error as before
    assert listed[str(failing.id)]["last_error"] == "RetryableError: y"
    assert listed[str(failing.id)]["recovered_error"] == ""


def test_api_list_filters_by_queue(
    api_client: APIClient, job_factory: Callable[..., Any], settings: Any
) -> None:
    settings.JOBS_QUEUES = ["default", "reports"]
    job_factory()
    report = job_factory(queue="reports")

    body = api_client.get(JOBS_URL, {"queue": "reports"}).json()

    assert [j["id"] for j in body["results"]] == [str(report.id)]
    assert _fields(api_client.get(JOBS_URL, {"queue": "nope"})) == ["queue"]


def test_api_list_ordering(api_client: APIClient, job_factory: Callable[..., Any]) -> None:
    old, new = job_factory(), job_factory()
    old.created_at = timezone.now() - timedelta(hours=1)
    old.save(update_fields=["created_at"])

    newest = [j["id"] for j in api_client.get(JOBS_URL).json()["results"]]
    oldest = [
        j["id"] for j in api_client.get(JOBS_URL, {"ordering": "created_at"}).json()["results"]
    ]

    assert newest == [str(new.id), str(old.id)]
    assert oldest == [str(old.id), str(new.id)]
    assert _fields(api_client.get(JOBS_URL, {"ordering": "payload"})) == ["ordering"]


def test_api_list_page_size_bounded(api_client: APIClient, job_factory: Callable[..., Any]) -> None:
    for _ in range(3):
        job_factory()

    body = api_client.get(JOBS_URL, {"page_size": 2}).json()

    assert (body["count"], len(body["results"])) == (3, 2)
    for bad in ("0", "201", "many"):
        response = api_client.get(JOBS_URL, {"page_size": bad})
        assert response.status_code == 400
        assert _fields(response) == ["page_size"]


@pytest.mark.parametrize(
    ("query", "fields"),
    [
        ({"stauts": "dead"}, ["stauts"]),
        ({"limit": "5", "offset": "1"}, ["limit", "offset"]),
        ({"status": ["dead", "queued"]}, ["status"]),
    ],
)
def test_api_list_refuses_unknown_or_repeated_query_parameters(
    api_client: APIClient, query: dict[str, Any], fields: list[str]
) -> None:
    response = api_client.get(JOBS_URL, query)

    assert response.status_code == 400
    assert _fields(response) == fields
