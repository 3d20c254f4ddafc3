"""`webhook.deliver`: POST a JSON body to a URL.

Retry rules (RFC 9110 §15.6 and §10.2.3): 5xx, 429 and network errors or
timeouts are retryable; any other 4xx (and a 3xx, which we do not follow) is
permanent. A `Retry-After` on 429/503 (delta-seconds or an HTTP date) is the
least delay before the next attempt, capped at MAX_RETRY_AFTER_SECONDS.
The receiver can dedupe on `Idempotency-Key`, which is the job id and so the
same on every attempt; `X-Job-Attempt` tells attempts apart.

Client `headers` are validated at submit time (RFC 9110 §5.1, §5.5, §5.6.2):
names are tokens, values are latin-1 text without control characters, and
the framing, hop-by-hop and platform headers are ours (RESERVED_HEADERS).
The request goes only to an address checked against private addresses
(jobs.kinds.outbound, jobs.kinds.netguard) unless
settings.JOBS_ALLOW_PRIVATE_DESTINATIONS is true; the name is resolved once.
"""

from __future__ import annotations

import email.utils
import re
import time
from typing import Any

import requests
from django.core.validators import URLValidator
from rest_framework import serializers

from jobs.kinds import netguard, outbound
from jobs.kinds.base import AttemptContext, Kind, PermanentError, RetryableError
from jobs.kinds.registry import register
from jobs.policy import Policy

MAX_RETRY_AFTER_SECONDS = 3600.0
# Bytes of the response body kept (for the error text); the rest is not read.
MAX_RESPONSE_BYTES = 4096
# Longest header value accepted (characters, after trimming).
MAX_HEADER_VALUE_CHARS = 4096
# RFC 9110 §5.1 / §5.6.2: field-name = token = 1*tchar.
HEADER_NAME_RE = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# RFC 9110 §5.5: CR, LF and NUL are invalid and dangerous; the other CTLs
# (%x00-1F except HTAB, and DEL) are invalid too.
HEADER_VALUE_FORBIDDEN_RE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# Headers the client may not set (compared case-insensitively): framing and
# hop-by-hop fields the HTTP client must own (RFC 9110 §7.2 Host, §8.6
# Content-Length, §7.6.1 Connection, §7.8 Upgrade, §10.1.4 TE, §6.6.2
# Trailer; RFC 9112 §6.1 Transfer-Encoding; Keep-Alive), and the ones this
# kind sets itself. Any Proxy-* name is refused too (RESERVED_HEADER_PREFIXES).
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "content-type",
        "idempotency-key",
        "x-job-id",
        "x-job-attempt",
    }
)
RESERVED_HEADER_PREFIXES = ("proxy-",)


def header_name_error(name: str, *, allow_reserved: bool = False) -> str | None:
    """Why `name` may not be sent as a client header, or None when it may.

    With `allow_reserved`, only the RFC 9110 token grammar is checked.
    """
    if not HEADER_NAME_RE.fullmatch(name):
        return (
            "Header name must be an RFC 9110 token: one or more of letters, digits "
            "and !#$%&'*+-.^_`|~ (no spaces, colons or control characters)."
        )
    if allow_reserved:
        return None
    lowered = name.lower()
    if lowered in RESERVED_HEADERS or lowered.startswith(RESERVED_HEADER_PREFIXES):
        return (
            f"Header {name!r} is set by the platform or the HTTP client and cannot be overridden."
        )
    return None


def header_value_error(value: str) -> str | None:
    """Why `value` may not be sent as a header value, or None when it may."""
    if len(value) > MAX_HEADER_VALUE_CHARS:
        return f"Header value must be at most {MAX_HEADER_VALUE_CHARS} characters."
    if HEADER_VALUE_FORBIDDEN_RE.search(value):
        return (
            "Header value must not contain CR, LF, NUL or other control characters "
            "(RFC 9110 §5.5); horizontal tab is allowed."
        )
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return "Header value must be latin-1 (ISO-8859-1) text."
    return None


class WebhookPayload(serializers.Serializer):
    url = serializers.CharField(
        max_length=2048, validators=[URLValidator(schemes=["http", "https"])]
    )
    body = serializers.JSONField(required=False, default=dict)
    # Values are not trimmed by the field (that would silently drop a
    # trailing CR LF); validate_headers removes only SP/HTAB, the OWS that
    # RFC 9110 §5.5 excludes from a field value.
    headers = serializers.DictField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False),
        required=False,
        default=dict,
    )
    connect_timeout = serializers.FloatField(min_value=0.1, max_value=30, default=3.0)
    read_timeout = serializers.FloatField(min_value=0.1, max_value=60, default=10.0)

    def validate_url(self, value: str) -> str:
        """Refuse a literal non-public address unless private destinations are allowed."""
        reason = netguard.literal_destination_error(value)
        if reason:
            raise serializers.ValidationError(reason)
        return value

    def validate_headers(self, value: dict[str, str]) -> dict[str, str]:
        """Headers that requests can send as given; values stripped of SP/HTAB at both ends.

        Raises ValidationError({name: [reason]}), which the API reports as
        `payload.headers.<name>`: for a name that is not an RFC 9110 token
        or is reserved (RESERVED_HEADERS, Proxy-*), a name repeated in
        another case, or a value with control characters, over
        MAX_HEADER_VALUE_CHARS characters or not latin-1 encodable.
        """
        errors: dict[str, list[str]] = {}
        cleaned: dict[str, str] = {}
        seen: dict[str, str] = {}
        for name, raw in value.items():
            stripped = raw.strip(" \t")
            reason = header_name_error(name) or header_value_error(stripped)
            if reason is None and name.lower() in seen:
                reason = (
                    f"Header {name!r} repeats {seen[name.lower()]!r} (names are case-insensitive)."
                )
            if reason:
                errors[name] = [reason]
                continue
            seen[name.lower()] = name
            cleaned[name] = stripped
        if errors:
            raise serializers.ValidationError(errors)
        return cleaned


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
    # One fuse per destination host once turned on (`{"webhook.deliver": {"fuse": true}}`).
    policy = Policy(max_attempts=6, soft_time_limit=75, hard_time_limit=90, fuse_key="url")

    def run(self, payload: dict[str, Any], ctx: AttemptContext) -> Any:
        """POST the body once. Returns {"status_code", "elapsed_seconds"} on 2xx.

        Raises RetryableError (5xx, 429, timeouts, connection or DNS errors)
        or PermanentError (other 4xx, 3xx, a header that cannot be sent, a
        destination that resolves to a non-public address while
        JOBS_ALLOW_PRIVATE_DESTINATIONS is false).
        """
        # Jobs accepted before headers were validated: refuse what can never be sent.
        # (Reserved names are still overridden by ours below, as they always were.)
        for name, value in payload["headers"].items():
            reason = header_name_error(name, allow_reserved=True) or header_value_error(value)
            if reason:
                raise PermanentError(f"header {name!r}: {reason}")
        headers = {
            **payload["headers"],
            "Content-Type": "application/json",
            "Idempotency-Key": str(ctx.job_id),
            "X-Job-Id": str(ctx.job_id),
            "X-Job-Attempt": str(ctx.attempt),
        }
        started = time.monotonic()
        try:
            with outbound.request(
                "POST",
                payload["url"],
                json=payload["body"],
                headers=headers,
                timeout=(payload["connect_timeout"], payload["read_timeout"]),
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
