"""The HTTP API: status codes, the one error shape, and nothing written on errors."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from jobs.models import DeadReason, Job, JobStatus

pytestmark = pytest.mark.django_db

JOBS_URL = "/api/jobs/"
FLAKY = {"kind": "demo.flaky", "payload": {"fail_times": 1}}


def _post(client: APIClient, body: Any, **extra: Any) -> Any:
    return client.post(JOBS_URL, data=json.dumps(body), content_type="application/json", **extra)


def _fields(response: Any) -> list[str]:
    """The `field` of each error, after checking the error shape."""
    data = response.json()
    assert set(data) == {"detail", "errors"}, data
    assert isinstance(data["detail"], str)
    assert data["detail"]
    for error in data["errors"]:
        assert set(error) == {"field", "reason"}, error
        assert error["reason"]
    return [error["field"] for error in data["errors"]]


# --- submit ------------------------------------------------------------------------


def test_api_submit_returns_202_with_id_status_and_url(api_client: APIClient) -> None:
    response = _post(api_client, FLAKY)

    assert response.status_code == 202
    body = response.json()
    job = Job.objects.get()
    assert body == {
        "id": str(job.id),
        "status": "queued",
        "url": f"http://testserver/api/jobs/{job.id}/",
    }
    assert response["Location"] == body["url"]


def test_api_submit_records_the_user(api_client: APIClient, user: Any) -> None:
    _post(api_client, FLAKY)

    assert Job.objects.get().created_by == user


def test_api_submit_idempotent_repeat_returns_200_same_job(api_client: APIClient) -> None:
    first = _post(api_client, {**FLAKY, "idempotency_key": "order-42"})

    again = _post(api_client, {**FLAKY, "idempotency_key": "order-42"})

    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json()["id"] == first.json()["id"]
    assert Job.objects.count() == 1


def test_api_submit_idempotency_key_header_accepted(api_client: APIClient) -> None:
    # given a submission keyed by header
    first = _post(api_client, FLAKY, HTTP_IDEMPOTENCY_KEY="hdr-1")

    # when the same request is sent again with the key in the header or the body
    by_header = _post(api_client, FLAKY, HTTP_IDEMPOTENCY_KEY="hdr-1")
    by_body = _post(api_client, {**FLAKY, "idempotency_key": "hdr-1"})

    # then both return the first job
    assert first.status_code == 202
    assert Job.objects.get().idempotency_key == "hdr-1"
    assert (by_header.status_code, by_body.status_code) == (200, 200)
    assert by_header.json()["id"] == by_body.json()["id"] == first.json()["id"]


def test_api_submit_same_key_different_body_409(api_client: APIClient) -> None:
    _post(api_client, FLAKY, HTTP_IDEMPOTENCY_KEY="k")

    response = _post(
        api_client,
        {"kind": "demo.flaky", "payload": {"fail_times": 3}},
        HTTP_IDEMPOTENCY_KEY="k",
    )

    assert response.status_code == 409
    assert _fields(response) == ["idempotency_key"]
    assert Job.objects.count() == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "no.such.kind", "payload": {}}, "kind"),
        ({"kind": "demo.flaky", "payload": "a string"}, "payload"),
        ({"kind": "demo.flaky", "payload": {"fail_times": "many"}}, "payload.fail_times"),
        ({"kind": "webhook.deliver", "payload": {"url": "nope"}}, "payload.url"),
        ({"kind": "demo.flaky"}, "payload"),
        ({"payload": {}}, "kind"),
        ({"kind": "demo.flaky", "payload": {}, "queue": "nope"}, "queue"),
    ],
    ids=[
        "unknown-kind",
        "payload-wrong-type",
        "payload-field-wrong-type",
        "payload-field-invalid",
        "payload-missing",
        "kind-missing",
        "unknown-queue",
    ],
)
def test_api_submit_invalid_body_400_names_field(
    api_client: APIClient, body: dict, field: str
) -> None:
    response = _post(api_client, body)

    assert response.status_code == 400
    assert field in _fields(response)
    assert not Job.objects.exists()


def test_api_submit_body_not_an_object_400(api_client: APIClient) -> None:
    response = _post(api_client, ["not", "an", "object"])

    assert response.status_code == 400
    assert _fields(response)
    assert not Job.objects.exists()


@pytest.mark.parametrize("raw", [b'{"kind": "demo.flaky", "payload": {', b"\xff\xfe{}", b"nul"])
def test_api_submit_malformed_json_400_names_body(api_client: APIClient, raw: bytes) -> None:
    response = api_client.post(JOBS_URL, data=raw, content_type="application/json")

    assert response.status_code == 400
    assert _fields(response) == ["body"]
    assert "Malformed JSON" in response.json()["detail"]
    assert not Job.objects.exists()


def test_api_submit_300_kib_body_413(api_client: APIClient) -> None:
    body = {**FLAKY, "payload": {"fail_times": 1, "padding": "x" * (300 * 1024)}}

    response = _post(api_client, body)

    assert response.status_code == 413
    assert _fields(response) == ["body"]
    assert not Job.objects.exists()


def test_api_submit_body_just_under_limit_is_parsed(api_client: APIClient, settings: Any) -> None:
    settings.JOBS_MAX_REQUEST_BYTES = 2048
    body = {"kind": "demo.flaky", "payload": {"fail_times": 1}, "queue": "default"}
    raw = json.dumps(body)
    raw = raw[:-1] + " " * (2048 - len(raw)) + "}"

    response = api_client.post(JOBS_URL, data=raw, content_type="application/json")

    assert response.status_code == 202


def test_api_submit_without_credentials_401(db: None) -> None:
    response = _post(APIClient(), FLAKY)

    assert response.status_code == 401
    assert _fields(response) == ["Authorization"]
    assert not Job.objects.exists()


def test_api_submit_bad_token_401(db: None) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")

    assert _post(client, FLAKY).status_code == 401


def test_api_submit_queue_full_503_with_retry_after(
    api_client: APIClient, settings: Any, broker_redis: Any
) -> None:
    # given a queue already holding its maximum of ready messages
    settings.JOBS_QUEUE_MAX_READY = 2
    settings.JOBS_BACKPRESSURE_RETRY_AFTER = 9
    broker_redis.rpush("default", "a")
    broker_redis.rpush("default\x06\x169", "b")

    # when a job is submitted
    response = _post(api_client, FLAKY)

    # then it is refused with Retry-After and nothing written
    assert response.status_code == 503
    assert response["Retry-After"] == "9"
    assert _fields(response) == ["queue"]
    assert not Job.objects.exists()


# --- read --------------------------------------------------------------------------


def test_api_detail_shows_status_attempts_and_result(
    api_client: APIClient, job_factory: Callable[..., Any], attempt_factory: Callable[..., Any]
) -> None:
    job = job_factory(status=JobStatus.SUCCEEDED, attempts_made=2, result={"rows": 3})
    attempt_factory(job, number=1, outcome="error", error_message="boom")
    attempt_factory(job, number=2, outcome="succeeded")

    response = api_client.get(f"{JOBS_URL}{job.id}/")

    assert response.status_code == 200
    body = response.json()
    assert body["id"] == str(job.id)
    assert body["status"] == "succeeded"
    assert body["result"] == {"rows": 3}
    assert [(a["number"], a["outcome"]) for a in body["attempts"]] == [
        (1, "error"),
        (2, "succeeded"),
    ]


def test_api_detail_unknown_job_404(api_client: APIClient) -> None:
    response = api_client.get(f"{JOBS_URL}{uuid.uuid4()}/")

    assert response.status_code == 404
    _fields(response)


def test_api_list_filters_by_status_and_kind(
    api_client: APIClient, job_factory: Callable[..., Any]
) -> None:
    # given jobs of two kinds and statuses
    queued = job_factory()
    dead = job_factory(status=JobStatus.DEAD, dead_reason=DeadReason.ERROR)
    webhook = job_factory(kind="webhook.deliver", payload={"url": "http://127.0.0.1/x"})

    # when listing with filters
    by_status = api_client.get(JOBS_URL, {"status": "dead"}).json()
    by_kind = api_client.get(JOBS_URL, {"kind": "webhook.deliver"}).json()
    both = api_client.get(JOBS_URL, {"status": "queued", "kind": "demo.flaky"}).json()
    everything = api_client.get(JOBS_URL).json()

    # then each filter selects its jobs, paginated
    assert [j["id"] for j in by_status["results"]] == [str(dead.id)]
    assert [j["id"] for j in by_kind["results"]] == [str(webhook.id)]
    assert [j["id"] for j in both["results"]] == [str(queued.id)]
    assert everything["count"] == 3
    assert "attempts" not in everything["results"][0]


def test_api_list_paginates_at_page_size(
    api_client: APIClient, job_factory: Callable[..., Any]
) -> None:
    for _ in range(51):
        job_factory()

    first = api_client.get(JOBS_URL).json()
    second = api_client.get(first["next"]).json()

    assert first["count"] == 51
    assert len(first["results"]) == 50
    assert len(second["results"]) == 1
    assert second["next"] is None


def test_api_list_invalid_status_filter_400(api_client: APIClient) -> None:
    response = api_client.get(JOBS_URL, {"status": "exploded"})

    assert response.status_code == 400
    assert _fields(response) == ["status"]


def test_api_list_requires_credentials(db: None) -> None:
    assert APIClient().get(JOBS_URL).status_code == 401


# --- cancel and requeue ------------------------------------------------------------


def test_api_cancel_queued_job_200(api_client: APIClient, job_factory: Callable[..., Any]) -> None:
    job = job_factory()

    response = api_client.post(f"{JOBS_URL}{job.id}/cancel/")

    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"


@pytest.mark.parametrize("status", [JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED])
def test_api_cancel_terminal_job_409(
    api_client: APIClient, job_factory: Callable[..., Any], status: str
) -> None:
    job = job_factory(status=status, finished_at=timezone.now())

    response = api_client.post(f"{JOBS_URL}{job.id}/cancel/")

    assert response.status_code == 409
    assert _fields(response) == ["status"]
    job.refresh_from_db()
    assert job.status == status


def test_api_requeue_dead_job_200(api_client: APIClient, job_factory: Callable[..., Any]) -> None:
    job = job_factory(status=JobStatus.DEAD, dead_reason=DeadReason.EXHAUSTED, attempts_made=5)

    response = api_client.post(f"{JOBS_URL}{job.id}/requeue/")

    assert response.status_code == 200
    assert response.json()["status"] == "queued"
    assert response.json()["dead_reason"] == ""


@pytest.mark.parametrize("status", [JobStatus.QUEUED, JobStatus.SUCCEEDED, JobStatus.CANCELLED])
def test_api_requeue_not_dead_409(
    api_client: APIClient, job_factory: Callable[..., Any], status: str
) -> None:
    job = job_factory(status=status)

    response = api_client.post(f"{JOBS_URL}{job.id}/requeue/")

    assert response.status_code == 409
    assert _fields(response) == ["status"]


@pytest.mark.parametrize("action", ["cancel", "requeue"])
def test_api_actions_unknown_job_404(api_client: APIClient, action: str) -> None:
    assert api_client.post(f"{JOBS_URL}{uuid.uuid4()}/{action}/").status_code == 404


# --- schema ------------------------------------------------------------------------


def test_api_schema_is_an_openapi_document(db: None) -> None:
    response = APIClient().get("/api/schema/", {"format": "json"})

    assert response.status_code == 200
    document = json.loads(response.content)
    assert document["openapi"].startswith("3.")
    assert "/api/jobs/" in document["paths"]
    assert "post" in document["paths"]["/api/jobs/"]
    assert "/api/jobs/{id}/cancel/" in document["paths"]
