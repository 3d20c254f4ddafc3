"""Hostile JSON against real gunicorn + PostgreSQL: 400 naming the field, never a 500.

Issue 8, item 5: "Lone UTF-16 surrogates: a string value in payload, a key
in payload → 500 (DataError from the JSON column); an unknown top-level
field named "\\ud800" → 500 while rendering the error (UnicodeEncodeError).
A payload nested 500-950 levels deep → 500 (RecursionError in the
fingerprint's canonical form). Expected: 400 naming the field; 400 with a
documented depth limit, never 500 at any depth." The rest of the kind:
numbers, NUL, bidi controls, characters outside the BMP, header fields.

Bodies are sent as raw bytes: `\\ud83d` is a JSON escape a client may send,
not a character requests could encode.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests

from tests.integration.harness import HTTP_TIMEOUT, Platform

pytestmark = pytest.mark.integration

# The README's documented limit (settings.JOBS_JSON_MAX_DEPTH default).
DEPTH_LIMIT = 64
WEBHOOK = '{"kind":"webhook.deliver","payload":{"url":"http://127.0.0.1:9/h",%s}}'


def _post(platform: Platform, raw: str, **headers: str) -> requests.Response:
    return platform.session.post(
        platform.url("/api/jobs/"),
        data=raw.encode("utf-8"),
        headers={"Content-Type": "application/json", **headers},
        timeout=HTTP_TIMEOUT,
    )


def _errors(response: requests.Response) -> dict[str, str]:
    assert response.headers["Content-Type"].startswith("application/json"), response.text[:300]
    body = response.json()
    assert set(body) == {"detail", "errors"}, body
    return {e["field"]: e["reason"] for e in body["errors"]}


def _assert_refused(
    platform: Platform, raw: str, field: str, words: list[str], **headers: str
) -> None:
    rows = platform.row_count()

    response = _post(platform, raw, **headers)

    assert response.status_code == 400, (response.status_code, response.text[:500])
    errors = _errors(response)
    assert field in errors, errors
    assert all(w in errors[field] for w in words), errors[field]
    assert platform.row_count() == rows


# -- item 5a: lone surrogates --------------------------------------------------


def test_hostile_surrogate_in_a_payload_value_is_400(api_platform: Platform) -> None:
    _assert_refused(
        api_platform,
        WEBHOOK % '"body":{"t":"\\ud83d"}',
        "payload.body.t",
        ["Lone UTF-16 surrogate \\ud83d"],
    )


def test_hostile_surrogate_in_a_payload_key_is_400(api_platform: Platform) -> None:
    _assert_refused(
        api_platform,
        WEBHOOK % '"body":{"\\ud83d":"t"}',
        "payload.body.\\ud83d",
        ["Field name", "surrogate"],
    )


def test_hostile_surrogate_as_an_unknown_top_level_field_is_400(api_platform: Platform) -> None:
    _assert_refused(
        api_platform,
        '{"kind":"demo.flaky","payload":{"fail_times":0},"\\ud800":1}',
        "\\ud800",
        ["Field name", "surrogate"],
    )


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (WEBHOOK % '"headers":{"\\udc00":"v"}', "payload.headers.\\udc00"),
        (WEBHOOK % '"headers":{"X-Trace":"a\\ud800"}', "payload.headers.X-Trace"),
        ('{"kind":"demo.flaky","payload":{},"idempotency_key":"k\\udfff"}', "idempotency_key"),
        ('{"kind":"demo\\ud800","payload":{}}', "kind"),
        ('{"kind":"demo.flaky","payload":{},"queue":"\\ud800"}', "queue"),
        (WEBHOOK % '"body":["ok",{"deep":["\\udbff"]}]', "payload.body.1.deep.0"),
    ],
    ids=["header-name", "header-value", "idempotency-key", "kind", "queue", "nested-in-list"],
)
def test_hostile_surrogate_anywhere_is_400_naming_the_field(
    api_platform: Platform, raw: str, field: str
) -> None:
    _assert_refused(api_platform, raw, field, ["urrogate"])


# -- item 5b: depth -------------------------------------------------------------


@pytest.mark.parametrize("depth", [500, 700, 950])
def test_hostile_deep_payload_is_400_with_the_documented_limit(
    api_platform: Platform, depth: int
) -> None:
    # payload (level 1) > body (level 2) > depth - 2 arrays
    arrays = depth - 2
    _assert_refused(
        api_platform,
        WEBHOOK % f'"body":{"[" * arrays}{"]" * arrays}',
        "payload.body.0",
        [f"more than {DEPTH_LIMIT} levels deep"],
    )


def test_hostile_depth_never_gives_500_at_any_depth(api_platform: Platform) -> None:
    # given bodies from just under the limit to far past the interpreter's
    # recursion limit, in arrays and in objects
    depths = [*range(DEPTH_LIMIT - 2, DEPTH_LIMIT + 3), *range(100, 1_101, 50), 5_000, 40_000]
    seen: dict[str, int] = {}
    for depth in depths:
        for shape, (open_, close) in {"arrays": ("[", "]"), "objects": ('{"a":', "}")}.items():
            inner = "[]" if shape == "arrays" else "1"
            levels = depth - 2 if shape == "arrays" else depth - 1
            nested = open_ * levels + inner + close * levels
            # when it is submitted
            response = _post(api_platform, WEBHOOK % f'"body":{nested}')
            # then it is accepted within the limit and refused past it, never a 500
            expected = 202 if depth <= DEPTH_LIMIT else 400
            seen[f"{shape}:{depth}"] = response.status_code
            assert response.status_code == expected, (shape, depth, response.text[:300])
            if expected == 400:
                (reason,) = _errors(response).values()
                assert str(DEPTH_LIMIT) in reason
    assert all(code < 500 for code in seen.values()), seen


# -- the rest of the kind: numbers, NUL, controls, astral characters -----------------


@pytest.mark.parametrize(
    ("fragment", "field"),
    [
        ('"body":{"t":NaN}', "payload.body.t"),
        ('"body":{"t":Infinity}', "payload.body.t"),
        ('"body":[-Infinity]', "payload.body.0"),
        ('"body":{"t":1e400}', "payload.body.t"),
        ('"body":{"t":-1e999}', "payload.body.t"),
        ('"connect_timeout":1e400', "payload.connect_timeout"),
        ('"body":{"t":"a\\u0000b"}', "payload.body.t"),
        ('"body":{"\\u0000":1}', "payload.body.\\u0000"),
    ],
    ids=[
        "nan",
        "infinity",
        "minus-infinity",
        "1e400",
        "minus-1e999",
        "1e400-float-field",
        "nul",
        "nul-key",
    ],
)
def test_hostile_numbers_and_nul_are_400_naming_the_field(
    api_platform: Platform, fragment: str, field: str
) -> None:
    _assert_refused(api_platform, WEBHOOK % fragment, field, [])


def test_hostile_integer_past_4300_digits_is_400(api_platform: Platform) -> None:
    _assert_refused(api_platform, WEBHOOK % f'"body":{{"t":{"9" * 5000}}}', "body", ["Malformed"])


@pytest.mark.parametrize(
    "body",
    [
        {
            "zero": -0.0,
            "big": int("9" * 4000),
            "neg": -(10**300),
            "tiny": 5e-324,
            "max": 1.7976931348623157e308,
        },
        {"\U0001f600": "\U0001f600 \U0010ffff \U00020000", "pair": "\ud83d\ude00"},
        {"bidi": "\u202eevil\u202c \u2066x\u2069 \u200f", "zw": "a\u200db\ufeff", "c1": "\x85\x9f"},
        {"controls": "\t\n\r\x01\x1f\x7f"},
    ],
    ids=["numbers", "astral", "bidi-and-format", "controls"],
)
def test_hostile_valid_but_unusual_json_is_stored_and_read_back(
    api_platform: Platform, body: dict[str, Any]
) -> None:
    # given a body every layer can hold, sent with escapes only where JSON needs them
    raw = json.dumps(
        {"kind": "webhook.deliver", "payload": {"url": "http://127.0.0.1:9/", "body": body}}
    )

    # when it is submitted
    response = _post(api_platform, raw)

    # then it is accepted, stored in PostgreSQL and read back as sent
    assert response.status_code == 202, response.text[:500]
    job = api_platform.job(response.json()["id"])
    sent = json.loads(raw)["payload"]["body"]
    assert job["payload"]["body"].keys() == sent.keys()
    for key, value in sent.items():
        assert _same(job["payload"]["body"][key], value), key


def _same(got: Any, sent: Any) -> bool:
    # jsonb keeps numbers as decimals: 1.7976931348623157e308 comes back as
    # the integer it prints as, -0.0 as 0. Equal as floats is equal enough.
    if isinstance(sent, float) and isinstance(got, int | float):
        return float(got) == sent
    return got == sent


@pytest.mark.parametrize("query", ["kind=%00", "status=queued&kind=demo.flaky%00"])
def test_hostile_nul_in_a_list_filter_is_400_naming_it(api_platform: Platform, query: str) -> None:
    response = api_platform.session.get(
        api_platform.url(f"/api/jobs/?{query}"), timeout=HTTP_TIMEOUT
    )

    assert response.status_code == 400, (response.status_code, response.text[:300])
    assert "NUL" in _errors(response)["kind"]


def test_hostile_post_to_a_mistyped_api_path_is_a_json_404(api_platform: Platform) -> None:
    response = api_platform.session.post(
        api_platform.url("/api/jobs/%00/cancel/"), timeout=HTTP_TIMEOUT
    )

    assert response.status_code == 404, (response.status_code, response.text[:300])
    assert "path" in _errors(response)


@pytest.mark.parametrize(
    "header",
    [
        "\xed\xa0\x80",  # the UTF-8 bytes of U+D800, as WSGI hands them over (latin-1)
        "\U0001f600".encode().decode("latin-1"),
        "\u202e".encode().decode("latin-1"),
    ],
    ids=["encoded-surrogate", "astral", "bidi"],
)
def test_hostile_idempotency_key_header_never_gives_500(
    api_platform: Platform, header: str
) -> None:
    response = api_platform.session.post(
        api_platform.url("/api/jobs/"),
        data=b'{"kind":"demo.flaky","payload":{"fail_times":0}}',
        headers={"Content-Type": "application/json", "Idempotency-Key": header.encode("latin-1")},
        timeout=HTTP_TIMEOUT,
    )

    assert response.status_code in (200, 202, 400), response.text[:300]
    if response.status_code == 400:
        assert "Idempotency-Key" in _errors(response)
