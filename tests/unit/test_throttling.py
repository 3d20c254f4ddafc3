"""jobs.api.throttling and jobs.services.rate_windows: what is counted, for whom, and the answer."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import InternalError
from django.test import RequestFactory
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from jobs.api.throttling import client_address
from jobs.models import RateWindow
from jobs.security_checks import check_api_rates, check_proxies_and_lockout
from jobs.services.rate_windows import rate_window_hit, rate_window_hits

pytestmark = pytest.mark.django_db


@pytest.fixture
def rates(settings: Any) -> Callable:
    def set_rates(**rates: str | None) -> None:
        framework = dict(settings.REST_FRAMEWORK)
        framework["DEFAULT_THROTTLE_RATES"] = {
            "token": None,
            "address": None,
            "auth_failure": None,
            **rates,
        }
        settings.REST_FRAMEWORK = framework

    return set_rates


def _request(remote: str, forwarded: str | None = None) -> Any:
    extra: dict[str, Any] = {"REMOTE_ADDR": remote}
    if forwarded is not None:
        extra["HTTP_X_FORWARDED_FOR"] = forwarded
    return RequestFactory().get("/api/jobs/", **extra)


@pytest.mark.parametrize(
    ("proxies", "forwarded", "address"),
    [
        (0, "1.2.3.4", "10.0.0.1"),  # no trusted proxy: X-Forwarded-For is the client's word
        (1, "1.2.3.4", "1.2.3.4"),
        (1, "6.6.6.6, 1.2.3.4", "1.2.3.4"),  # what the one trusted proxy saw
        (2, "6.6.6.6, 1.2.3.4, 10.0.0.9", "1.2.3.4"),
        (1, "not-an-address", "10.0.0.1"),
        (1, None, "10.0.0.1"),
        (1, "2001:DB8::1", "2001:db8::1"),
    ],
)
def test_client_address_trusts_only_the_configured_proxies(
    settings: Any, proxies: int, forwarded: str | None, address: str
) -> None:
    framework = dict(settings.REST_FRAMEWORK)
    framework["NUM_PROXIES"] = proxies
    settings.REST_FRAMEWORK = framework

    assert client_address(_request("10.0.0.1", forwarded)) == address


def test_rate_window_counts_in_fixed_windows() -> None:
    assert rate_window_hit(key="k", duration=60, now=120.0) == (1, 60.0)
    assert rate_window_hit(key="k", duration=60, now=150.0) == (2, 30.0)
    assert rate_window_hits(key="k", duration=60, now=179.0) == (2, 1.0)
    # the next window starts at 0; another key is another count
    assert rate_window_hit(key="k", duration=60, now=180.0)[0] == 1
    assert rate_window_hit(key="other", duration=60, now=150.0)[0] == 1


def test_rate_window_read_counts_nothing() -> None:
    rate_window_hits(key="k", duration=1, now=5.0)

    assert not RateWindow.objects.exists()


def _client(name: str) -> APIClient:
    user = User.objects.create_user(username=name, password="not-used")
    client = APIClient(REMOTE_ADDR="192.0.2.1")
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


def _statuses(client: APIClient, n: int) -> Counter[int]:
    return Counter(client.get("/api/jobs/").status_code for _ in range(n))


def test_a_token_past_its_rate_gets_429_in_the_error_shape(rates: Any) -> None:
    rates(token="3/m")
    client = _client("a")

    assert _statuses(client, 5) == {200: 3, 429: 2}
    answer = client.get("/api/jobs/")
    assert 1 <= int(answer["Retry-After"]) <= 60
    assert answer.json()["errors"] == [{"field": "client", "reason": answer.json()["detail"]}]
    # another token is counted apart
    assert _statuses(_client("b"), 3) == {200: 3}


def test_an_address_past_its_rate_gets_429_whatever_the_token(rates: Any) -> None:
    rates(address="4/m")

    assert _statuses(_client("a"), 2) + _statuses(_client("b"), 3) == {200: 4, 429: 1}


def test_failed_authentications_lock_the_address_out_before_the_lookup(rates: Any) -> None:
    rates(auth_failure="3/m")
    wrong = APIClient(REMOTE_ADDR="192.0.2.1")
    wrong.credentials(HTTP_AUTHORIZATION="Token wrong")

    assert _statuses(wrong, 5) == {401: 3, 429: 2}
    # a right token from that address waits too; no token at all is not a failure
    assert _client("a").get("/api/jobs/").status_code == 429
    assert APIClient(REMOTE_ADDR="192.0.2.1").get("/api/jobs/").status_code == 401
    elsewhere = _client("b")
    elsewhere.defaults["REMOTE_ADDR"] = "192.0.2.2"
    assert elsewhere.get("/api/jobs/").status_code == 200


def test_a_database_refusing_the_count_lets_reads_through_and_refuses_writes(
    rates: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a read-only standby after a failover: the counter's INSERT is refused
    rates(token="100/m", address="100/m")

    def refused(**_: Any) -> tuple[int, float]:
        raise InternalError("cannot execute INSERT in a read-only transaction")

    monkeypatch.setattr("jobs.api.throttling.rate_window_hit", refused)
    client = _client("a")

    assert _statuses(client, 3) == {200: 3}
    with pytest.raises(InternalError):
        client.post("/api/jobs/", {"kind": "demo.sleep", "payload": {}}, format="json")


def test_off_lifts_a_limit(rates: Any) -> None:
    rates()

    assert _statuses(_client("a"), 5) == {200: 5}
    assert not RateWindow.objects.exists()


@pytest.mark.parametrize("rate", ["0/s", "ten/m", "5/fortnight", "5"])
def test_a_rate_drf_cannot_parse_is_a_startup_error(rates: Any, rate: str) -> None:

    rates(token=rate)

    assert [m.id for m in check_api_rates(None)] == ["jobs.E011"]


def test_a_negative_proxy_count_is_a_startup_error(settings: Any) -> None:

    settings.JOBS_TRUSTED_PROXY_COUNT = -1

    assert [m.id for m in check_proxies_and_lockout(None)] == ["jobs.E012"]
