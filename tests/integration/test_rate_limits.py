"""API rate limits and the admin's login lockout, over a real gunicorn (2 workers) and PostgreSQL.

Issue 18, item 8: "300 wrong API tokens in 1.6 s, all 401; 100 wrong admin
passwords then the right one logs in. Expected: rate limits on the API (per
token and per client address, 429 with Retry-After in the error shape) and
on admin login (django-axes)."

The platform trusts one proxy (JOBS_TRUSTED_PROXY_COUNT=1), so each test
speaks from addresses of its own through X-Forwarded-For, as nginx would
set it. Limits are per minute, so what is counted does not depend on how
fast this machine answers.
"""

from __future__ import annotations

import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests

from devstack.services import wait_for
from tests.integration.harness import HTTP_TIMEOUT, Platform, PlatformFactory, require_postgres

TOKEN_RATE, ADDRESS_RATE = 30, 20  # per minute, below
PASSWORD = "the-right-password-1"


@pytest.fixture(scope="module")
def limited(_logroot: Any) -> Iterator[tuple[Platform, dict[str, str]]]:

    require_postgres()
    factory = PlatformFactory(logroot=_logroot)
    try:
        platform = factory(
            "limits",
            env={
                "JOBS_TRUSTED_PROXY_COUNT": "1",
                "JOBS_API_RATE_PER_TOKEN": f"{TOKEN_RATE}/m",
                "JOBS_API_RATE_PER_ADDRESS": f"{ADDRESS_RATE}/m",
                # the production defaults of the failure limit and the lockout
                "JOBS_API_AUTH_FAILURE_RATE": "20/m",
            },
            worker=False,
            scheduler=False,
        )
        users: dict[str, dict[str, Any]] = {f"u{i}": {} for i in range(6)}
        users["ops"] = {"staff": True, "password": PASSWORD}
        yield platform, platform.create_users(users)
    finally:
        factory.close()


def _from(address: str, token: str | None = None) -> dict[str, str]:
    headers = {"X-Forwarded-For": address}
    if token is not None:
        headers["Authorization"] = f"Token {token}"
    return headers


def _get_all(platform: Platform, headers: Callable[[int], dict[str, str]], n: int) -> list[Any]:
    with requests.Session() as session, ThreadPoolExecutor(8) as pool:
        return list(
            pool.map(
                lambda i: session.get(
                    platform.url("/api/jobs/"), headers=headers(i), timeout=HTTP_TIMEOUT
                ),
                range(n),
            )
        )


def _inside_one_window(seconds: float = 10.0) -> None:
    """Return once the current one-minute window (epoch-aligned, jobs.services.rate_windows;
    the server shares this machine's clock) has `seconds` left, so a burst and the checks
    after it are counted in one window, not split at a minute's turn."""
    wait_for(
        lambda: 60 - time.time() % 60 >= seconds,
        timeout=seconds + 5,
        interval=0.1,
        what=f"{seconds:.0f} s left in the minute",
    )


def _throttled_shape(response: requests.Response) -> None:
    assert response.status_code == 429
    assert int(response.headers["Retry-After"]) >= 1
    body = response.json()
    assert set(body) == {"detail", "errors"}
    assert body["errors"] == [{"field": "client", "reason": body["detail"]}]


@pytest.mark.integration
def test_300_wrong_tokens_mostly_get_429(limited: tuple[Platform, dict[str, str]]) -> None:
    platform, tokens = limited
    _inside_one_window()
    started = time.monotonic()

    answers = _get_all(platform, lambda i: _from("203.0.113.7", f"{uuid.uuid4().hex}{i}"), 300)

    elapsed = time.monotonic() - started
    statuses = Counter(r.status_code for r in answers)
    print(f"300 wrong tokens in {elapsed:.2f} s: {dict(statuses)}")
    assert set(statuses) == {401, 429}
    # 20 a minute, plus at most the 8 in flight between the check and the count
    assert statuses[401] <= 20 + 8, statuses
    _throttled_shape(next(r for r in answers if r.status_code == 429))
    # the address is refused before its token is looked up, a right one too
    locked = requests.get(
        platform.url("/api/jobs/"), headers=_from("203.0.113.7", tokens["u0"]), timeout=30
    )
    assert locked.status_code == 429
    # another address is not
    assert (
        requests.get(
            platform.url("/api/jobs/"), headers=_from("203.0.113.8", tokens["u0"]), timeout=30
        ).status_code
        == 200
    )
    # the counters are rows in the database, shared by both gunicorn workers
    keys = [r[0] for r in platform.rows("SELECT key FROM jobs_ratewindow")]
    assert any("auth_failure" in k and "203.0.113.7" in k for k in keys), keys


@pytest.mark.integration
def test_one_token_past_its_rate_gets_429(limited: tuple[Platform, dict[str, str]]) -> None:
    platform, tokens = limited
    _inside_one_window()

    # one token, each request from another address (the address limit stays far)
    answers = _get_all(platform, lambda i: _from(f"198.51.100.{i + 1}", tokens["u1"]), 50)

    statuses = Counter(r.status_code for r in answers)
    assert statuses[200] >= TOKEN_RATE, statuses
    assert statuses[429] >= 10, statuses
    _throttled_shape(next(r for r in answers if r.status_code == 429))


@pytest.mark.integration
def test_one_address_past_its_rate_gets_429(limited: tuple[Platform, dict[str, str]]) -> None:
    platform, tokens = limited
    _inside_one_window()
    names = ["u2", "u3", "u4", "u5"]

    # one address, its requests spread over four tokens (each far below its own limit)
    answers = _get_all(platform, lambda i: _from("192.0.2.50", tokens[names[i % 4]]), 48)

    statuses = Counter(r.status_code for r in answers)
    assert statuses[200] >= ADDRESS_RATE, statuses
    assert statuses[429] >= 10, statuses
    _throttled_shape(next(r for r in answers if r.status_code == 429))


def _login(platform: Platform, address: str, password: str) -> requests.Response:
    with requests.Session() as session:
        session.headers["X-Forwarded-For"] = address
        page = session.get(platform.url("/admin/login/"), timeout=HTTP_TIMEOUT)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert token, page.text[:500]
        answer = session.post(
            platform.url("/admin/login/?next=/admin/"),
            data={
                "csrfmiddlewaretoken": token.group(1),
                "username": "ops",
                "password": password,
                "next": "/admin/",
            },
            timeout=HTTP_TIMEOUT,
            allow_redirects=False,
        )
        answer.logged_in = "sessionid" in session.cookies  # type: ignore[attr-defined]
        return answer


@pytest.mark.integration
def test_100_wrong_admin_passwords_then_the_right_one_does_not_log_in(
    limited: tuple[Platform, dict[str, str]],
) -> None:
    platform, _ = limited
    attacker = "203.0.113.99"

    statuses = Counter(_login(platform, attacker, f"guess-{i}").status_code for i in range(100))
    right = _login(platform, attacker, PASSWORD)

    assert statuses[429] >= 90, statuses  # locked after 10 failures
    assert right.status_code == 429
    assert not right.logged_in  # type: ignore[attr-defined]
    # the lockout is the attacker's address's, kept in axes' table
    assert (
        platform.scalar(
            "SELECT failures_since_start FROM axes_accessattempt WHERE ip_address = %s", (attacker,)
        )
        >= 10
    )
    elsewhere = _login(platform, "198.51.100.200", PASSWORD)
    assert elsewhere.status_code == 302
    assert elsewhere.logged_in  # type: ignore[attr-defined]
