"""The API's `waiting` field: why a held-back job waits, and until when (jobs.waiting)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from rest_framework.test import APIClient

from jobs.models import JobStatus
from jobs.reasons import WaitingReason
from tests.unit.conftest import report_worker

pytestmark = pytest.mark.django_db

DUE = datetime(2026, 11, 30, 10, 1, 14, 500000, tzinfo=UTC)
DETAIL = "retry delayed 74 s by the retry budget of webhook.deliver (after a backoff of 8.2 s)"


def test_api_job_held_by_the_budget_says_why_and_until_when(
    api_client: APIClient, user: Any, job_factory: Callable[..., Any]
) -> None:
    job = job_factory(
        kind="webhook.deliver",
        status=JobStatus.RETRYING,
        attempts_made=4,
        next_attempt_at=DUE,
        waiting_reason="retry_budget",
        waiting_detail=DETAIL,
        created_by=user,
    )

    detail = api_client.get(f"/api/jobs/{job.id}/").json()
    listed = api_client.get("/api/jobs/").json()["results"]

    expected = {"reason": "retry_budget", "detail": DETAIL, "until": "2026-11-30T10:01:14.500000Z"}
    assert detail["waiting"] == expected
    assert [j["waiting"] for j in listed] == [expected]


def test_api_job_not_waiting_has_waiting_null(
    api_client: APIClient, user: Any, job_factory: Callable[..., Any], no_reports: None
) -> None:
    # given a worker consuming its queue (else the job waits for one: jobs.waiting_now)
    report_worker(["default"])
    job = job_factory(status=JobStatus.QUEUED, created_by=user)

    assert api_client.get(f"/api/jobs/{job.id}/").json()["waiting"] is None


def test_api_schema_documents_waiting_with_its_reasons(api_client: APIClient) -> None:
    schema = api_client.get("/api/schema/", HTTP_ACCEPT="application/json").json()

    job = schema["components"]["schemas"]["Job"]["properties"]["waiting"]
    waiting = schema["components"]["schemas"]["Waiting"]
    assert job.get("nullable") or {"type": "null"} in job.get("oneOf", [])
    assert set(waiting["properties"]) == {"reason", "detail", "until"}
    reasons = schema["components"]["schemas"][
        waiting["properties"]["reason"]["$ref"].rsplit("/", 1)[1]
    ]
    assert set(reasons["enum"]) == {reason.value for reason in WaitingReason}
    assert {"backoff", "retry_after", "retry_budget", "run_after", "paused"} <= set(reasons["enum"])
