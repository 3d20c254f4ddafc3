"""webhook.deliver: header validation (RFC 9110) and the private-destination (SSRF) guard."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.exceptions import ValidationError

from devstack.receiver import WebhookReceiver
from jobs.errors import InvalidSubmission
from jobs.kinds import PermanentError, get_kind, netguard
from jobs.kinds.webhook import WebhookDeliver
from jobs.services import job_submit

# --- header validation (RFC 9110 §5.1, §5.5, §5.6.2) -------------------------


def _header_errors(headers: dict[str, Any]) -> dict[str, Any]:
    """The per-name errors of validating `headers`; fails the test when none are raised."""
    with pytest.raises(ValidationError) as info:
        get_kind("webhook.deliver").validate_payload(
            {"url": "http://127.0.0.1/x", "headers": headers}
        )
    assert set(info.value.detail) == {"headers"}
    return info.value.detail["headers"]


@pytest.mark.parametrize(
    "name", ["X Bad", "", " X-Lead", "X-Colon:", "X-Ä", "X-\r\nInjected", "X-(paren)", "X\tTab"]
)
def test_webhook_header_name_not_a_token_rejected(name: str) -> None:
    errors = _header_errors({name: "v", "X-Fine": "ok"})

    assert list(errors) == [name]
    assert "RFC 9110 token" in str(errors[name][0])


@pytest.mark.parametrize(
    "value",
    [
        "a\r\nX-Injected: 1",
        "a\nb",
        "a\rb",
        "trailing\r\n",
        "a\x00b",
        "bell\x07",
        "del\x7f",
        "euro €",
        "snowman ☃",
        "x" * 4097,
    ],
)
def test_webhook_header_value_invalid_rejected(value: str) -> None:
    errors = _header_errors({"X-Custom": value})

    assert list(errors) == ["X-Custom"]


@pytest.mark.parametrize(
    "name",
    [
        "Host",
        "host",
        "Content-Length",
        "TRANSFER-ENCODING",
        "Connection",
        "Keep-Alive",
        "Upgrade",
        "TE",
        "te",
        "Trailer",
        "Proxy-Authorization",
        "proxy-connection",
        "Content-Type",
        "idempotency-key",
        "X-Job-Id",
        "x-job-attempt",
    ],
)
def test_webhook_reserved_header_rejected(name: str) -> None:
    errors = _header_errors({name: "v"})

    assert "cannot be overridden" in str(errors[name][0])


def test_webhook_header_names_repeated_in_another_case_rejected() -> None:
    errors = _header_errors({"X-Token": "a", "x-token": "b"})

    assert list(errors) == ["x-token"]
    assert "case-insensitive" in str(errors["x-token"][0])


def test_webhook_valid_headers_accepted_and_ows_trimmed() -> None:
    headers = {
        "Authorization": "Bearer abc.def",
        "X-Token_1!#$%&'*+-.^`|~": "tab\tinside",
        "X-Latin-1": "café ÿ",
        "X-Padded": " \t padded \t ",
        "X-Empty": "",
        "X-Max": "x" * 4096,
    }

    payload = get_kind("webhook.deliver").validate_payload(
        {"url": "http://127.0.0.1/x", "headers": headers}
    )

    assert payload["headers"] == {**headers, "X-Padded": "padded"}


@pytest.mark.django_db
def test_webhook_bad_header_reported_as_payload_headers_name() -> None:

    with pytest.raises(InvalidSubmission) as info:
        job_submit(
            kind="webhook.deliver",
            payload={"url": "http://127.0.0.1/x", "headers": {"X Bad": "1", "X-Ok": "a\nb"}},
        )

    assert set(info.value.errors) == {"payload.headers.X Bad", "payload.headers.X-Ok"}


def test_webhook_run_sends_valid_unusual_headers(deliver: Callable[..., Any]) -> None:
    # Headers that pass validation must be sendable: not fail every attempt.
    _, result = deliver(
        "/ok",
        headers={"X-Latin-1": "café ÿ", "X-Tab": "a\tb", "X-Token_1!#$%&'*+-.^`|~": " v "},
    )

    assert result["status_code"] == 200


@pytest.mark.parametrize(
    "headers", [{"X-Bad": "a\r\nX-Injected: 1"}, {"X Bad": "1"}, {"X-Euro": "€"}]
)
def test_webhook_run_unsendable_header_from_older_payload_is_permanent(
    receiver: WebhookReceiver, attempt_context: Callable[..., Any], headers: dict[str, str]
) -> None:
    # given a payload stored before headers were validated (it skips validation)
    kind = WebhookDeliver()
    payload = {**kind.validate_payload({"url": receiver.url("/ok")}), "headers": headers}
    ctx = attempt_context()

    # then the attempt fails permanently instead of being retried to exhaustion
    with pytest.raises(PermanentError, match="header"):
        kind.run(payload, ctx)
    assert receiver.deliveries_for(str(ctx.job_id)) == []


def test_webhook_run_reserved_header_from_older_payload_still_overridden(
    receiver: WebhookReceiver, attempt_context: Callable[..., Any]
) -> None:
    kind = WebhookDeliver()
    payload = {
        **kind.validate_payload({"url": receiver.url("/ok")}),
        "headers": {"Idempotency-Key": "spoofed", "X-Job-Attempt": "99"},
    }
    ctx = attempt_context()

    kind.run(payload, ctx)

    [delivery] = receiver.deliveries_for(str(ctx.job_id))
    assert (delivery.idempotency_key, delivery.attempt) == (str(ctx.job_id), 1)


# --- private destinations (SSRF) ---------------------------------------------


@pytest.fixture
def restricted(settings: Any) -> None:
    """Private destinations refused, as in production."""
    settings.JOBS_ALLOW_PRIVATE_DESTINATIONS = False


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:6379/",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.5/hook",
        "http://[::1]:8000/hook",
        "http://localhost:6379/",
    ],
)
def test_webhook_literal_private_url_rejected_at_submit(restricted: None, url: str) -> None:
    with pytest.raises(ValidationError) as info:
        get_kind("webhook.deliver").validate_payload({"url": url})

    assert "private destinations are not allowed" in str(info.value.detail["url"][0])


@pytest.mark.django_db
def test_webhook_private_url_reported_as_payload_url(restricted: None) -> None:

    with pytest.raises(InvalidSubmission) as info:
        job_submit(kind="webhook.deliver", payload={"url": "http://169.254.169.254/"})

    assert list(info.value.errors) == ["payload.url"]


def test_webhook_private_url_accepted_when_allowed(settings: Any) -> None:
    settings.JOBS_ALLOW_PRIVATE_DESTINATIONS = True

    payload = get_kind("webhook.deliver").validate_payload({"url": "http://127.0.0.1:6379/"})

    assert payload["url"] == "http://127.0.0.1:6379/"


def test_webhook_run_name_resolving_to_private_address_is_permanent(
    restricted: None,
    receiver: WebhookReceiver,
    attempt_context: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given a name (accepted at submit: no DNS there) that resolves to loopback
    monkeypatch.setattr(netguard, "resolve", lambda host, port: ["93.184.216.34", "127.0.0.1"])
    kind = WebhookDeliver()
    payload = kind.validate_payload({"url": f"http://hooks.example.test:{receiver.port}/ok"})
    ctx = attempt_context()

    # then the attempt fails permanently, before any request is made
    with pytest.raises(PermanentError, match="resolves to a non-public address"):
        kind.run(payload, ctx)
    assert receiver.deliveries_for(str(ctx.job_id)) == []


def test_webhook_run_literal_loopback_is_permanent_when_restricted(
    receiver: WebhookReceiver, attempt_context: Callable[..., Any], settings: Any
) -> None:
    # given a job accepted while private destinations were allowed
    kind = WebhookDeliver()
    payload = kind.validate_payload({"url": receiver.url("/ok")})
    ctx = attempt_context()

    # when the setting is turned off before it runs
    settings.JOBS_ALLOW_PRIVATE_DESTINATIONS = False

    # then it is refused without reaching the receiver
    with pytest.raises(PermanentError, match="non-public"):
        kind.run(payload, ctx)
    assert receiver.deliveries_for(str(ctx.job_id)) == []
