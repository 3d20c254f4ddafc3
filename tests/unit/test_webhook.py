"""webhook.deliver: Retry-After parsing and delivery against a real local receiver."""

from __future__ import annotations

import dataclasses
import email.utils
import time
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.exceptions import ValidationError

from devstack.receiver import WebhookReceiver
from devstack.services import free_port
from jobs.kinds import PermanentError, RetryableError, get_kind
from jobs.kinds.webhook import MAX_RETRY_AFTER_SECONDS, WebhookDeliver, parse_retry_after

# --- parse_retry_after -------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        ("0", 0.0),
        (" 3 ", 3.0),
        ("2.5", 2.5),
    ],
)
def test_parse_retry_after_delta_seconds(value: str, expected: float) -> None:
    assert parse_retry_after(value) == expected


def test_parse_retry_after_http_date_is_seconds_from_now() -> None:
    now = 1_700_000_000.0
    header = email.utils.formatdate(now + 90, usegmt=True)

    assert parse_retry_after(header, now=now) == pytest.approx(90.0)


def test_parse_retry_after_http_date_in_the_past_is_zero() -> None:
    now = 1_700_000_000.0
    header = email.utils.formatdate(now - 600, usegmt=True)

    assert parse_retry_after(header, now=now) == 0.0


@pytest.mark.parametrize(
    "value", [None, "", "soon", "12 seconds", "Thu, 99 Foo 2024 25:61:00 GMT", "nan"]
)
def test_parse_retry_after_garbage_is_none(value: str | None) -> None:
    assert parse_retry_after(value) is None


def test_parse_retry_after_negative_is_zero() -> None:
    assert parse_retry_after("-30") == 0.0


@pytest.mark.parametrize("value", ["999999999", "1e400", "inf"])
def test_parse_retry_after_huge_is_capped(value: str) -> None:
    assert parse_retry_after(value) == MAX_RETRY_AFTER_SECONDS


def test_parse_retry_after_far_future_date_is_capped() -> None:
    now = 1_700_000_000.0
    header = email.utils.formatdate(now + 10 * 86400, usegmt=True)

    assert parse_retry_after(header, now=now) == MAX_RETRY_AFTER_SECONDS


# --- payload validation ------------------------------------------------------


def test_webhook_payload_defaults_filled_in() -> None:
    payload = get_kind("webhook.deliver").validate_payload({"url": "http://127.0.0.1:9/hook"})

    assert payload["body"] == {}
    assert payload["headers"] == {}
    assert payload["connect_timeout"] == 3.0
    assert payload["read_timeout"] == 10.0


@pytest.mark.parametrize(
    "payload",
    [
        {},
        {"url": "ftp://example.com/x"},
        {"url": "not a url"},
        {"url": "http://127.0.0.1/x", "read_timeout": 0},
        {"url": "http://127.0.0.1/x", "headers": ["a"]},
    ],
)
def test_webhook_payload_invalid_raises(payload: dict) -> None:
    with pytest.raises(ValidationError):
        get_kind("webhook.deliver").validate_payload(payload)


# --- delivery against the devstack receiver ---------------------------------


def test_webhook_run_2xx_succeeds(deliver: Callable[..., Any]) -> None:
    _, result = deliver("/ok", body={"hello": "world"})

    assert result["status_code"] == 200
    assert result["elapsed_seconds"] >= 0


def test_webhook_run_sends_idempotency_key_and_attempt_headers(
    receiver: WebhookReceiver, deliver: Callable[..., Any]
) -> None:
    # given a delivery of attempt 3
    ctx, _ = deliver("/ok", attempt=3)

    # then the receiver saw the job id as Idempotency-Key and the attempt number
    [delivery] = receiver.deliveries_for(str(ctx.job_id))
    assert delivery.idempotency_key == str(ctx.job_id)
    assert delivery.attempt == 3
    assert delivery.path == "/ok"


def test_webhook_run_idempotency_key_same_across_attempts(
    receiver: WebhookReceiver, attempt_context: Callable[..., Any]
) -> None:
    # given two attempts of the same job
    kind = WebhookDeliver()
    payload = kind.validate_payload({"url": receiver.url("/ok")})
    first = attempt_context(attempt=1)
    second = dataclasses.replace(first, attempt=2)

    # when both deliver
    kind.run(payload, first)
    kind.run(payload, second)

    # then both carried the same key and different attempt numbers
    deliveries = receiver.deliveries_for(str(first.job_id))
    assert [d.attempt for d in deliveries] == [1, 2]
    assert {d.idempotency_key for d in deliveries} == {str(first.job_id)}


@pytest.mark.parametrize("path", ["/status/400", "/status/404", "/status/422", "/gone"])
def test_webhook_run_4xx_is_permanent(deliver: Callable[..., Any], path: str) -> None:
    with pytest.raises(PermanentError, match=r"HTTP 4\d\d"):
        deliver(path)


def test_webhook_run_redirect_is_permanent_not_followed(deliver: Callable[..., Any]) -> None:
    with pytest.raises(PermanentError, match="HTTP 302"):
        deliver("/status/302")


def test_webhook_run_429_is_retryable_with_retry_after(deliver: Callable[..., Any]) -> None:
    with pytest.raises(RetryableError, match="HTTP 429") as info:
        deliver("/status/429?retry_after=3")

    assert info.value.retry_after == 3.0


def test_webhook_run_503_retry_after_honoured(deliver: Callable[..., Any]) -> None:
    with pytest.raises(RetryableError) as info:
        deliver("/status/503?retry_after=7")

    assert info.value.retry_after == 7.0


@pytest.mark.parametrize("path", ["/status/503", "/status/500", "/status/502"])
def test_webhook_run_5xx_is_retryable_without_retry_after(
    deliver: Callable[..., Any], path: str
) -> None:
    with pytest.raises(RetryableError, match=r"HTTP 5\d\d") as info:
        deliver(path)

    assert info.value.retry_after is None


def test_webhook_run_retry_after_ignored_on_500(deliver: Callable[..., Any]) -> None:
    with pytest.raises(RetryableError) as info:
        deliver("/status/500?retry_after=30")

    assert info.value.retry_after is None


def test_webhook_run_read_timeout_is_retryable(deliver: Callable[..., Any]) -> None:
    started = time.monotonic()

    with pytest.raises(RetryableError, match="timeout"):
        deliver("/flaky?fail=0&slow=1&slow_seconds=2", read_timeout=0.3)

    assert time.monotonic() - started < 1.5


def test_webhook_run_connection_refused_is_retryable(
    attempt_context: Callable[..., Any],
) -> None:

    kind = WebhookDeliver()
    payload = kind.validate_payload({"url": f"http://127.0.0.1:{free_port()}/x"})

    with pytest.raises(RetryableError, match="connection error"):
        kind.run(payload, attempt_context())


def test_webhook_custom_headers_cannot_override_idempotency_key() -> None:
    # Once silently replaced at run time; now refused at submit so the client knows.
    with pytest.raises(ValidationError) as info:
        get_kind("webhook.deliver").validate_payload(
            {
                "url": "http://127.0.0.1/x",
                "headers": {"Idempotency-Key": "spoofed", "X-Job-Attempt": "99"},
            }
        )

    assert set(info.value.detail["headers"]) == {"Idempotency-Key", "X-Job-Attempt"}
