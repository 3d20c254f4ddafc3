"""jobs.kinds.netguard: the SSRF guard shared by webhook.deliver and report.csv_summary."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jobs.kinds import PermanentError, RetryableError, netguard

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def restricted(settings: Any) -> None:
    """Private destinations refused, as in production."""
    settings.JOBS_ALLOW_PRIVATE_DESTINATIONS = False


@pytest.fixture
def fake_dns(monkeypatch: pytest.MonkeyPatch) -> Callable[[dict[str, list[str]]], list[str]]:
    """fake_dns({host: [addresses]}) makes netguard.resolve answer from the map.

    Unknown names fail like NXDOMAIN. Returns the list of hosts looked up.
    """
    lookups: list[str] = []

    def install(answers: dict[str, list[str]]) -> list[str]:
        def resolve(host: str, port: int) -> list[str]:
            lookups.append(host)
            if host not in answers:
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            return answers[host]

        monkeypatch.setattr(netguard, "resolve", resolve)
        return lookups

    return install


# --- is_public_address -------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.255.255.254",
        "10.0.0.1",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",  # cloud metadata
        "100.64.0.1",  # RFC 6598 shared address space
        "0.0.0.0",
        "255.255.255.255",
        "224.0.0.1",
        "239.255.255.250",
        "240.0.0.1",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "fd12:3456::1",
        "ff02::1",
        "ff0e::1",  # global-scope multicast: still refused
        "::ffff:127.0.0.1",  # IPv4-mapped loopback
        "::ffff:169.254.169.254",
        "2002:7f00:1::1",  # 6to4 wrapping 127.0.0.1
        "2002:a00:1::1",  # 6to4 wrapping 10.0.0.1
        "64:ff9b::7f00:1",
    ],
)
def test_non_public_addresses(address: str) -> None:
    assert netguard.is_public_address(ipaddress.ip_address(address)) is False


@pytest.mark.parametrize(
    "address", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8"]
)
def test_public_addresses(address: str) -> None:
    assert netguard.is_public_address(ipaddress.ip_address(address)) is True


# --- submit-time literal check -----------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:6379/",
        "http://169.254.169.254/latest/meta-data/",
        "https://10.1.2.3/hook",
        "http://[::1]:8080/x",
        "http://[::ffff:127.0.0.1]/x",
        "http://[fe80::1]/x",
        "http://0.0.0.0/x",
        "http://evil.example@127.0.0.1/x",  # userinfo, then the real host
        "http://2130706433/",  # 127.0.0.1 in inet_aton forms
        "http://0x7f.0.0.1/",
        "http://127.1/",
        "http://localhost:6379/",
        "http://LOCALHOST./x",
        "http://api.localhost/x",
    ],
)
def test_literal_non_public_destination_has_a_reason(restricted: None, url: str) -> None:
    reason = netguard.literal_destination_error(url)

    assert reason is not None
    assert "private destinations are not allowed" in reason


@pytest.mark.parametrize(
    "url", ["http://93.184.216.34/x", "https://[2606:4700:4700::1111]/x", "https://example.com/x"]
)
def test_literal_check_passes_public_addresses_and_names(
    restricted: None, fake_dns: Callable[..., list[str]], url: str
) -> None:
    lookups = fake_dns({})

    assert netguard.literal_destination_error(url) is None
    assert lookups == []  # names are never resolved at submit time


def test_literal_check_off_when_private_destinations_allowed(settings: Any) -> None:
    settings.JOBS_ALLOW_PRIVATE_DESTINATIONS = True

    assert netguard.literal_destination_error("http://127.0.0.1:6379/") is None


# --- run-time check: resolve once, check every answer ----------------------------------------------------------


def test_resolve_destination_refuses_a_name_resolving_to_loopback(
    restricted: None, fake_dns: Callable[..., list[str]]
) -> None:
    fake_dns({"hooks.example.test": ["127.0.0.1"]})

    with pytest.raises(PermanentError, match=r"resolves to a non-public address \(127\.0\.0\.1\)"):
        netguard.resolve_destination("http://hooks.example.test:6379/")


def test_resolve_destination_refuses_when_any_answer_is_private(
    restricted: None, fake_dns: Callable[..., list[str]]
) -> None:
    fake_dns({"mixed.example.test": ["93.184.216.34", "::ffff:10.0.0.7"]})

    with pytest.raises(PermanentError, match=r"::ffff:10\.0\.0\.7"):
        netguard.resolve_destination("https://mixed.example.test/hook")


def test_resolve_destination_passes_public_answers(
    restricted: None, fake_dns: Callable[..., list[str]]
) -> None:
    lookups = fake_dns({"public.example.test": ["93.184.216.34", "2606:4700:4700::1111"]})

    destination = netguard.resolve_destination("https://public.example.test/hook")

    assert lookups == ["public.example.test"]
    assert destination == netguard.Destination(
        host="public.example.test", port=443, addresses=("93.184.216.34", "2606:4700:4700::1111")
    )


def test_resolve_destination_resolves_the_host_requests_connects_to(
    restricted: None, fake_dns: Callable[..., list[str]]
) -> None:
    # IDNA-encoded and lower-cased, as requests sends it; userinfo ignored.
    lookups = fake_dns({"xn--bcher-kva.example.test": ["93.184.216.34"]})

    netguard.resolve_destination("http://user:pw@BÜCHER.example.test:8080/x")

    assert lookups == ["xn--bcher-kva.example.test"]


def test_resolve_destination_refuses_literal_loopback_without_fake_dns(restricted: None) -> None:
    with pytest.raises(PermanentError, match="non-public"):
        netguard.resolve_destination("http://127.0.0.1:6379/")


def test_resolve_destination_refuses_localhost_without_lookup(
    restricted: None, fake_dns: Callable[..., list[str]]
) -> None:
    lookups = fake_dns({})

    with pytest.raises(PermanentError, match="loopback name"):
        netguard.resolve_destination("http://localhost:6379/")
    assert lookups == []


def test_resolve_destination_unresolvable_name_is_retryable(
    restricted: None, fake_dns: Callable[..., list[str]]
) -> None:
    fake_dns({})

    with pytest.raises(RetryableError, match="cannot resolve"):
        netguard.resolve_destination("http://nowhere.example.test/")


def test_resolve_destination_allows_private_answers_when_allowed(
    settings: Any, fake_dns: Callable[..., list[str]]
) -> None:
    # Still resolved once and pinned: only the check is off.
    settings.JOBS_ALLOW_PRIVATE_DESTINATIONS = True
    lookups = fake_dns({"hooks.example.test": ["10.0.0.7"]})

    literal = netguard.resolve_destination("http://127.0.0.1:6379/")
    named = netguard.resolve_destination("http://hooks.example.test/")

    assert literal.addresses == ("127.0.0.1",)
    assert named.addresses == ("10.0.0.7",)
    assert lookups == ["hooks.example.test"]  # a literal address is never looked up


def test_guard_defaults_to_refusing_when_setting_is_missing(settings: Any) -> None:
    del settings.JOBS_ALLOW_PRIVATE_DESTINATIONS

    assert netguard.private_destinations_allowed() is False


# --- settings ----------------------------------------------------------------


def _setting_in(module: str, **extra_env: str) -> str:
    env = {
        key: value
        for key, value in os.environ.items()
        if key != "JOBS_ALLOW_PRIVATE_DESTINATIONS" and not key.startswith("DJANGO_")
    }
    env.update(
        DJANGO_SECRET_KEY="test-only",
        DATABASE_URL="sqlite:///:memory:",
        **extra_env,
    )
    code = f"import {module} as s; print(s.JOBS_ALLOW_PRIVATE_DESTINATIONS)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def test_production_settings_refuse_private_destinations_by_default() -> None:
    assert _setting_in("config.settings.production") == "False"


def test_production_settings_can_allow_private_destinations() -> None:
    assert (
        _setting_in("config.settings.production", JOBS_ALLOW_PRIVATE_DESTINATIONS="true") == "True"
    )


def test_local_settings_allow_private_destinations_for_loopback_receivers() -> None:
    assert _setting_in("config.settings.local") == "True"
