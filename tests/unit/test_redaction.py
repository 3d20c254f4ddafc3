"""jobs.redaction, and the runner boundary that applies it to every failed attempt."""

from __future__ import annotations

import base64
import traceback
from collections.abc import Callable
from typing import Any

import pytest
from celery.exceptions import Retry
from rest_framework import serializers

from jobs import redaction, task_states
from jobs.attempt_classify import run_kind
from jobs.decisions import Action, Decision
from jobs.kinds import Kind, RetryableError
from jobs.models import AttemptOutcome
from jobs.policy import Policy
from jobs.services import AttemptEnd

# --- redact: URLs --------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("GET https://user:pw@h.example/x?token=t1", "GET https://***@h.example/x?***"),
        (
            "fetching http://u:p@h:9/a.csv?t=1#frag: boom",
            "fetching http://***@h:9/a.csv?***#***: boom",
        ),
        ("RetryableError('http://u:p@h/x?t=1')", "RetryableError('http://***@h/x?***')"),
        ("(see http://h/p?q=1).", "(see http://h/p?***)."),
        ("user:p@ss@host: http://user:p@ss@host/x", "user:p@ss@host: http://***@host/x"),
        (
            "Max retries exceeded with url: /hook?token=t1 (Caused by",
            "Max retries exceeded with url: /hook?*** (Caused by",
        ),
        ("GET /data.csv?token=t&x=1 HTTP/1.1", "GET /data.csv?*** HTTP/1.1"),
        ("two http://a/?x=1 and https://b/?y=2", "two http://a/?*** and https://b/?***"),
    ],
)
def test_redact_removes_url_credentials_queries_and_fragments(text: str, expected: str) -> None:
    assert redaction.redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "HTTP 503: Service Unavailable",
        "https://example.com/path/to/file.csv",
        "http://h.example:8080, then",
        "mail user@example.com about it",
        "What? a = b",
        "row 3 has 1001 columns; at most 1000",
        "",
    ],
)
def test_redact_leaves_text_without_secrets_alone(text: str) -> None:
    assert redaction.redact(text) == text


# --- redact: declared secrets ---------------------------------------------------


def test_redact_replaces_declared_secrets_and_their_encoded_forms() -> None:
    secret = "s3cr3t/val+ue"
    text = f"echo {secret} and {secret.replace('/', '%2F').replace('+', '%2B')}"

    assert redaction.redact(text, {secret}) == "echo *** and ***"


def test_redact_replaces_whole_tokens_only_and_ignores_short_secrets() -> None:
    assert redaction.redact("prod production", {"prod"}) == "*** production"
    assert redaction.redact("id 42", {"42"}) == "id 42"


def test_payload_secrets_of_a_webhook_payload() -> None:
    payload = {
        "url": "https://hooks.example/x?token=qtok&n=1#fragment1",
        "headers": {"Authorization": "Bearer htok1234", "X-Trace": "abcd"},
        "body": {"note": "not a secret"},
    }

    found = redaction.payload_secrets(payload)

    assert {"qtok", "fragment1", "Bearer htok1234", "htok1234", "abcd"} <= found
    assert "not a secret" not in found


def test_payload_secrets_of_url_credentials_include_the_basic_header() -> None:
    found = redaction.payload_secrets({"source": "http://user:pa%40ss@h.example/x.csv"})

    assert {"pa%40ss", "pa@ss", base64.b64encode(b"user:pa@ss").decode()} <= found


# --- redact_exception --------------------------------------------------------------


def _chained() -> BaseException:
    # Secrets built at run time: a traceback also prints source lines, which hold no values.
    token, password, header = "abcd" + "1234", "pw" + "1234", "hdr-" + "5678"
    try:
        try:
            raise ConnectionError(f"url: /x?token={token} refused")
        except ConnectionError as inner:
            raise RetryableError(f"fetching http://u:{password}@h/x?token={token}") from inner
    except RetryableError as outer:
        outer.add_note(f"header Bearer {header} was sent")
        return outer


def test_redact_exception_redacts_the_whole_chain_and_keeps_names_and_frames() -> None:
    original = _chained()

    stand_in = redaction.redact_exception(original, {"hdr-5678"})
    text = "".join(traceback.format_exception(stand_in))

    for secret in ("abcd1234", "pw1234", "hdr-5678"):
        assert secret not in text
    assert "jobs.kinds.base.RetryableError: fetching http://***@h/x?***" in text
    assert "ConnectionError: url: /x?*** refused" in text
    assert "The above exception was the direct cause" in text
    assert "_chained" in text  # the frames are the original's
    assert stand_in.__traceback__ is original.__traceback__


# --- the runner boundary ----------------------------------------------------------------


class _Payload(serializers.Serializer):
    url = serializers.CharField()
    headers = serializers.DictField(child=serializers.CharField(), default=dict)


class _LeakyKind(Kind):
    """Fails with the payload's URL and header in its message, chained to another error."""

    name = "test.leaky_errors"
    payload_serializer = _Payload
    policy = Policy(max_attempts=2)

    def run(self, payload: dict[str, Any], ctx: Any) -> Any:
        try:
            raise OSError(f"sent {payload['headers']['Authorization']} to {payload['url']}")
        except OSError as exc:
            raise RetryableError(f"fetching {payload['url']}: {exc}") from exc


class _DeclaringKind(_LeakyKind):
    name = "test.declaring"

    def secret_values(self, payload: dict[str, Any]) -> frozenset[str]:
        return frozenset({"custom-secret-9"})

    def run(self, payload: dict[str, Any], ctx: Any) -> Any:
        raise RetryableError("the custom-secret-9 leaked")


PAYLOAD = {
    "url": "https://user:pw-123456@hooks.example/x?token=tok-123456",
    "headers": {"Authorization": "Bearer hdr-123456"},
}
SECRETS = ("pw-123456", "tok-123456", "hdr-123456")


def _leaks(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


def test_run_kind_redacts_message_traceback_and_exception(
    attempt_context: Callable[..., Any],
) -> None:
    report = run_kind(_LeakyKind(), dict(PAYLOAD), attempt_context(), _LeakyKind.policy)

    assert report.outcome == AttemptOutcome.ERROR
    assert report.error_type == "RetryableError"
    assert _leaks(report.error_message) == []
    assert "fetching https://***@hooks.example/x?***" in report.error_message
    assert _leaks(report.traceback) == []
    assert report.exception is not None
    assert _leaks("".join(traceback.format_exception(report.exception))) == []


def test_run_kind_uses_the_kinds_declared_secrets(attempt_context: Callable[..., Any]) -> None:
    report = run_kind(_DeclaringKind(), dict(PAYLOAD), attempt_context(), _DeclaringKind.policy)

    assert report.error_message == "the *** leaked"


def test_celery_retry_raised_for_a_redacted_report_carries_no_secret(
    attempt_context: Callable[..., Any],
) -> None:
    # given the report of a failed attempt, decided for a retry
    report = run_kind(_LeakyKind(), dict(PAYLOAD), attempt_context(), _LeakyKind.policy)
    end = AttemptEnd(
        status="retrying",
        decision=Decision(action=Action.RETRY, delay_seconds=1.0),
        outcome=report.outcome,
        attempt=1,
        max_attempts=2,
    )

    # when the task raises what gives it its Celery state
    with pytest.raises(Retry) as info:
        task_states.raise_for(end=end, report=report, attempt=1, max_attempts=2, result={})

    # then Celery's event text (repr of the exception, the formatted chain) holds no secret
    retry = info.value
    texts = [str(retry), repr(retry.exc), "".join(traceback.format_exception(retry))]
    assert [_leaks(text) for text in texts] == [[], [], []]
