"""`webhook.deliver`: POST a JSON body to a URL.

Retry rules (RFC 9110 §15.6 and §10.2.3): 5xx, 429 and network errors or
timeouts are retryable; any other 4xx (and a 3xx, which we do not follow) is
permanent. A `Retry-After` on 429/503 (delta-seconds or an HTTP date) is the
least delay before the next attempt, capped at MAX_RETRY_AFTER_SECONDS.
The receiver can dedupe on `Idempotency-Key`, which is the job id and so the
same on every attempt; `X-Job-Attempt` tells attempts apart.
"""

from __future__ import annotations

import email.utils
import time
from typing import Any

import requests
from django.core.validators import URLValidator
from rest_framework import serializers

from jobs.kinds.base import AttemptContext, Kind, PermanentError, RetryableError
from jobs.kinds.registry import register
from jobs.policy import Policy

MAX_RETRY_AFTER_SECONDS = 3600.0
# Bytes of the response body kept (for the error text); the rest is not read.
MAX_RESPONSE_BYTES = 4096


class WebhookPayload(serializers.Serializer):
    url = serializers.CharField(
        max_length=2048, validators=[URLValidator(schemes=["http", "https"])]
    )
    body = serializers.JSONField(required=False, default=dict)
    headers = serializers.DictField(
        child=serializers.CharField(max_length=4096, allow_blank=True), required=False, default=dict
    )
    connect_timeout = serializers.FloatField(min_value=0.1, max_value=30, default=3.0)
    read_timeout = serializers.FloatField(min_value=0.1, max_value=60, default=10.0)


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds from a Retry-After header value, or None when absent or unparseable.

    Accepts delta-seconds ("120") and HTTP dates; negative values become 0 and
    large ones are capped at MAX_RETRY_AFTER_SECONDS.
    """
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_SECONDS)


@register
class WebhookDeliver(Kind):
    name = "webhook.deliver"
    payload_serializer = WebhookPayload
    policy = Policy(max_attempts=6, soft_time_limit=75, hard_time_limit=90)

    def run(self, payload: dict[str, Any], ctx: AttemptContext) -> Any:
        headers = {
            **payload["headers"],
            "Content-Type": "application/json",
            "Idempotency-Key": str(ctx.job_id),
            "X-Job-Id": str(ctx.job_id),
            "X-Job-Attempt": str(ctx.attempt),
        }
        started = time.monotonic()
        try:
            with requests.post(
                payload["url"],
                json=payload["body"],
                headers=headers,
                timeout=(payload["connect_timeout"], payload["read_timeout"]),
                allow_redirects=False,
                stream=True,
            ) as response:
                snippet = response.raw.read(MAX_RESPONSE_BYTES, decode_content=True) or b""
        except requests.Timeout as exc:
            raise RetryableError(f"timeout: {exc}") from exc
        except requests.ConnectionError as exc:
            raise RetryableError(f"connection error: {exc}") from exc
        status = response.status_code
        text = snippet.decode("utf-8", errors="replace")[:500]
        if 200 <= status < 300:
            return {"status_code": status, "elapsed_seconds": round(time.monotonic() - started, 4)}
        if status == 429 or status >= 500:
            retry_after = (
                parse_retry_after(response.headers.get("Retry-After"))
                if status in (429, 503)
                else None
            )
            raise RetryableError(f"HTTP {status}: {text}", retry_after=retry_after)
        raise PermanentError(f"HTTP {status}: {text}")
