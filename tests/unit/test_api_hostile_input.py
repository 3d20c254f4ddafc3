"""Hostile and malformed input: always a 4xx in the API's error shape, never a 500, nothing written."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from jobs import broker
from jobs.checks import MAX_JSON_DEPTH
from jobs.models import Job

pytestmark = pytest.mark.django_db

JOBS_URL = "/api/jobs/"
FLAKY = {"kind": "demo.flaky", "payload": {"fail_times": 1}}


def _post_raw(client: APIClient, raw: str | bytes, **extra: Any) -> Any:
    return client.post(JOBS_URL, data=raw, content_type="application/json", **extra)


def _errors(response: Any) -> dict[str, str]:
    data = response.json()
    assert set(data) == {"detail", "errors"}, data
    assert data["errors"], data
    return {e["field"]: e["reason"] for e in data["errors"]}


@pytest.mark.parametrize(
    "raw",
    [
        '{"kind": "demo.flaky", "payload": {"fail_times": ' + "9" * 5000 + "}}",
        '{"kind": "demo.flaky", "payload": ' + "[" * 50_000 + "]" * 50_000 + "}",
    ],
    ids=["integer-past-4300-digits", "nested-50000-deep"],
)
def test_api_submit_unparseable_json_is_400_not_500(api_client: APIClient, raw: str) -> None:
    response = _post_raw(api_client, raw)

    assert response.status_code == 400, response.content[:300]
    assert "body" in _errors(response)
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**FLAKY, "priorty": 5}, "priorty"),
        ({"kind": "demo.flaky", "payload": {"fail_times": 1, "failtimes": 2}}, "payload.failtimes"),
        (
            {
                "kind": "webhook.deliver",
                "payload": {"url": "http://127.0.0.1:1/", "body": {"a": "x\x00y"}},
            },
            "payload.body.a",
        ),
        ({**FLAKY, "idempotency_key": "k\x00"}, "idempotency_key"),
    ],
    ids=["unknown-top-level-field", "unknown-payload-field", "nul-in-payload", "nul-in-key"],
)
def test_api_submit_refuses_unknown_fields_and_nul(
    api_client: APIClient, body: Any, field: str
) -> None:
    response = _post_raw(api_client, json.dumps(body))

    assert response.status_code == 400, response.content
    assert field in _errors(response)
    assert Job.objects.count() == 0


WEBHOOK = '{"kind":"webhook.deliver","payload":{"url":"http://127.0.0.1:9000/h",%s}}'


@pytest.mark.parametrize(
    ("raw", "field", "reason"),
    [
        (WEBHOOK % '"body":{"t":"\\ud83d"}', "payload.body.t", "Lone UTF-16 surrogate \\ud83d"),
        (WEBHOOK % '"body":{"\\ud83d":1}', "payload.body.\\ud83d", "Field name"),
        ('{"kind":"demo.flaky","payload":{},"\\ud800":1}', "\\ud800", "surrogate"),
        (WEBHOOK % '"headers":{"\\udc00":"v"}', "payload.headers.\\udc00", "surrogate"),
        (WEBHOOK % '"headers":{"X-A":"\\ud800"}', "payload.headers.X-A", "surrogate"),
        (
            '{"kind":"demo.flaky","payload":{},"idempotency_key":"\\ud800"}',
            "idempotency_key",
            "surrogate",
        ),
        ('{"kind":"\\ud800","payload":{}}', "kind", "surrogate"),
        (WEBHOOK % '"body":{"t":NaN}', "payload.body.t", "Not a finite number"),
        (WEBHOOK % '"body":{"t":-Infinity}', "payload.body.t", "Not a finite number"),
        (WEBHOOK % '"body":{"t":1e400}', "payload.body.t", "Not a finite number"),
        (
            '{"kind":"demo.flaky","payload":{"sleep_seconds":1e400}}',
            "payload.sleep_seconds",
            "finite",
        ),
        (WEBHOOK % '"body":{"\\u0000":1}', "payload.body.\\u0000", "NUL"),
    ],
    ids=[
        "surrogate-in-payload-value",
        "surrogate-in-payload-key",
        "surrogate-top-level-field-name",
        "surrogate-header-name",
        "surrogate-header-value",
        "surrogate-idempotency-key",
        "surrogate-kind",
        "nan",
        "minus-infinity",
        "1e400",
        "1e400-in-a-float-field",
        "nul-in-payload-key",
    ],
)
def test_api_submit_hostile_json_is_400_naming_the_field(
    api_client: APIClient, raw: str, field: str, reason: str
) -> None:
    response = _post_raw(api_client, raw)

    assert response.status_code == 400, response.content
    errors = _errors(response)
    assert field in errors, errors
    assert reason in errors[field]
    assert Job.objects.count() == 0


@pytest.mark.parametrize("depth", [65, 100, 500, 700, 950, 990, 1_500, 5_000, 100_000])
def test_api_submit_deep_payload_is_400_with_the_limit(api_client: APIClient, depth: int) -> None:
    raw = WEBHOOK % f'"body":{"[" * (depth - 1)}{"]" * (depth - 1)}'

    response = _post_raw(api_client, raw)

    assert response.status_code == 400, response.content[:300]
    ((field, reason),) = _errors(response).items()
    assert field.startswith(("payload", "body")), field
    assert "64" in reason
    assert Job.objects.count() == 0


def test_api_submit_payload_at_the_depth_limit_is_accepted(api_client: APIClient) -> None:
    # payload (1) > body (2) > 62 arrays: 64 levels, the default limit
    raw = WEBHOOK % f'"body":{"[" * 62}{"]" * 62}'

    response = _post_raw(api_client, raw)

    assert response.status_code == 202, response.content
    assert Job.objects.count() == 1


def test_api_submit_at_the_highest_allowed_depth_limit_round_trips(
    api_client: APIClient, settings: Any
) -> None:
    # given the largest JOBS_JSON_MAX_DEPTH that jobs.E003 allows

    settings.JOBS_JSON_MAX_DEPTH = MAX_JSON_DEPTH
    arrays = MAX_JSON_DEPTH - 2
    raw = WEBHOOK % f'"body":{"[" * arrays}{"]" * arrays}'

    # when a payload exactly that deep is submitted and read back
    response = _post_raw(api_client, raw)
    assert response.status_code == 202, response.content[:300]
    detail = api_client.get(response.json()["url"])

    # then validation, the fingerprint, storage and rendering all had room
    assert detail.status_code == 200
    assert detail.json()["payload"]["body"] == json.loads(raw)["payload"]["body"]


@pytest.mark.parametrize(
    "body",
    [
        {"t": -0.0, "big": 10**300, "tiny": 1e-320},
        {"\U0001f600": "\U0001f600\U0010ffff", "bidi": "\u202eevil\u2066"},
    ],
    ids=["negative-zero-and-huge-numbers", "astral-and-bidi"],
)
def test_api_submit_unusual_but_valid_json_is_accepted(api_client: APIClient, body: Any) -> None:
    raw = json.dumps(
        {"kind": "webhook.deliver", "payload": {"url": "http://127.0.0.1:9/", "body": body}}
    )

    response = _post_raw(api_client, raw)

    assert response.status_code == 202, response.content
    assert Job.objects.get().payload["body"] == json.loads(json.dumps(body))


@pytest.mark.parametrize(
    ("query", "field"),
    [("kind=%00", "kind"), ("status=queued&kind=a%00b", "kind"), ("%00=1", "\\u0000")],
    ids=["nul-value", "nul-inside-a-value", "nul-name"],
)
def test_api_nul_in_a_query_parameter_is_400_naming_it(
    api_client: APIClient, query: str, field: str
) -> None:
    response = api_client.get(f"{JOBS_URL}?{query}")

    assert response.status_code == 400, response.content
    assert "NUL" in _errors(response)[field]


def test_nul_in_a_query_parameter_outside_the_api_is_a_plain_400(api_client: APIClient) -> None:
    response = api_client.get("/admin/jobs/job/?q=%00")

    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/plain")


def test_api_submit_idempotency_header_too_long_is_400(api_client: APIClient) -> None:
    response = _post_raw(api_client, json.dumps(FLAKY), HTTP_IDEMPOTENCY_KEY="k" * 300)

    assert response.status_code == 400
    assert "Idempotency-Key" in _errors(response)
    assert Job.objects.count() == 0


def test_api_submit_idempotency_body_and_header_disagree_is_400(api_client: APIClient) -> None:
    response = _post_raw(
        api_client, json.dumps({**FLAKY, "idempotency_key": "a"}), HTTP_IDEMPOTENCY_KEY="b"
    )

    assert response.status_code == 400
    assert "idempotency_key" in _errors(response)


def test_api_submit_idempotency_header_utf8_is_decoded(api_client: APIClient) -> None:
    # given a UTF-8 key, which WSGI hands over as latin-1 text
    raw_header = "ключ".encode().decode("latin-1")

    response = _post_raw(api_client, json.dumps(FLAKY), HTTP_IDEMPOTENCY_KEY=raw_header)

    assert response.status_code == 202, response.content
    assert Job.objects.get().idempotency_key == "ключ"


def test_api_submit_chunked_body_is_411(api_client: APIClient) -> None:
    response = _post_raw(api_client, json.dumps(FLAKY), HTTP_TRANSFER_ENCODING="chunked")

    assert response.status_code == 411
    assert "Content-Length" in _errors(response)
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    "path",
    [
        "/api/jobs/ffffffffffffffffffffffffffffffffffff/",
        "/api/jobs/------------------------------------/",
        "/api/jobs/zzz/",
        "/api/nothing-here/",
    ],
)
def test_api_bad_job_paths_are_json_404(api_client: APIClient, path: str) -> None:
    response = api_client.get(path)

    assert response.status_code == 404
    assert response["Content-Type"].startswith("application/json")
    assert "path" in _errors(response)


def test_api_cancel_of_non_uuid_id_is_404(api_client: APIClient) -> None:
    response = api_client.post("/api/jobs/ffffffffffffffffffffffffffffffffffff/cancel/")

    assert response.status_code == 404
    assert "path" in _errors(response)


def test_api_wrong_method_and_media_type_name_the_problem(api_client: APIClient) -> None:
    assert "method" in _errors(api_client.delete(JOBS_URL))
    form = api_client.post(JOBS_URL, data={"kind": "demo.flaky"}, format="multipart")
    assert form.status_code == 415
    assert "Content-Type" in _errors(form)


def test_api_docs_page_serves_swagger_ui_without_a_cdn(api_client: APIClient) -> None:
    response = api_client.get("/api/docs/")

    assert response.status_code == 200
    page = response.content.decode()
    assert "swagger-ui" in page
    assert "cdn.jsdelivr.net" not in page


def test_api_submit_survives_a_broker_client_failure(
    api_client: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a broker client that fails in an unexpected way while counting the queue

    def broken(queues: list[str]) -> dict[str, int]:
        raise AttributeError("'NoneType' object has no attribute 'readline'")

    monkeypatch.setattr(broker, "ready_counts", broken)

    # when a job is submitted, then it is accepted and recorded (the outbox publishes it)
    response = _post_raw(api_client, json.dumps(FLAKY))

    assert response.status_code == 202, response.content
    assert Job.objects.count() == 1
