"""jobs.kinds.outbound: requests go only to the address that was checked, with the name for Host, SNI and TLS.

Real servers in a network namespace of the test's own (tests/unit/conftest.py
`ssrf_hosts`: a public one on 93.184.216.34, internal ones on 127.0.0.1, ::1
and 169.254.169.254, all on one port) and a resolver whose answers change on
every lookup (devstack.rebinding_dns).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from devstack.netns import HostServer
from jobs.kinds import PermanentError, outbound
from jobs.kinds.netguard import Destination
from tests.unit.ssrf_hosts import INTERNAL_ANSWERS, PUBLIC_ADDRESS, PUBLIC_BODY, SsrfHosts

NAME = "rebind.example.test"


def _get(url: str, **kwargs: Any) -> tuple[int, bytes]:
    with outbound.request("GET", url, timeout=5, **kwargs) as response:
        return response.status_code, response.content


@pytest.mark.parametrize("internal", INTERNAL_ANSWERS)
def test_request_connects_to_the_checked_answer_when_the_name_rebinds(
    ssrf_hosts: SsrfHosts, rebinding_dns: Callable[..., Any], internal: str
) -> None:
    # given a name whose first answer is public and every later one internal
    resolver = rebinding_dns({NAME: [[PUBLIC_ADDRESS], [internal]]})

    # when a request is made to it
    status, body = ssrf_hosts.run(_get, f"http://{NAME}:{ssrf_hosts.port}/x")

    # then the name was resolved once and the public (checked) server answered
    assert (status, body) == (200, PUBLIC_BODY)
    assert resolver.count(NAME) == 1
    assert ssrf_hosts.internal_hits() == []
    assert [(h["path"], h["host"]) for h in ssrf_hosts.public.hits] == [
        ("/x", f"{NAME}:{ssrf_hosts.port}")
    ]


@pytest.mark.parametrize("internal", INTERNAL_ANSWERS)
def test_request_refuses_a_name_when_any_answer_is_internal(
    ssrf_hosts: SsrfHosts, rebinding_dns: Callable[..., Any], internal: str
) -> None:
    rebinding_dns({NAME: [[PUBLIC_ADDRESS, internal]]})

    with pytest.raises(PermanentError, match="non-public"):
        ssrf_hosts.run(_get, f"http://{NAME}:{ssrf_hosts.port}/x")
    assert ssrf_hosts.public.hits == []
    assert ssrf_hosts.internal_hits() == []


def test_request_tries_the_checked_answers_in_order(
    ssrf_hosts: SsrfHosts, rebinding_dns: Callable[..., Any], settings: Any
) -> None:
    # given a first answer that refuses connections (nothing listens on 127.0.0.2)
    settings.JOBS_ALLOW_PRIVATE_DESTINATIONS = True
    rebinding_dns({NAME: [["127.0.0.2", PUBLIC_ADDRESS], ["127.0.0.1"]]})

    status, body = ssrf_hosts.run(_get, f"http://{NAME}:{ssrf_hosts.port}/x")

    # then the next checked answer is tried, never a new lookup
    assert (status, body) == (200, PUBLIC_BODY)
    assert ssrf_hosts.internal_hits() == []


def test_request_is_pinned_when_private_destinations_are_allowed(
    ssrf_hosts: SsrfHosts, rebinding_dns: Callable[..., Any], settings: Any
) -> None:
    settings.JOBS_ALLOW_PRIVATE_DESTINATIONS = True
    resolver = rebinding_dns({NAME: [[PUBLIC_ADDRESS], ["127.0.0.1"]]})

    assert ssrf_hosts.run(_get, f"http://{NAME}:{ssrf_hosts.port}/x")[0] == 200
    assert resolver.count(NAME) == 1
    assert ssrf_hosts.internal_hits() == []


def test_request_ignores_proxy_variables_and_netrc(
    ssrf_hosts: SsrfHosts,
    rebinding_dns: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    # given a proxy in the environment (a proxy resolves the name itself) and a netrc entry
    proxy = f"http://127.0.0.1:{ssrf_hosts.port}"
    for variable in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(variable, proxy)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine {NAME} login someone password from-netrc\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    rebinding_dns({NAME: [[PUBLIC_ADDRESS]]})

    ssrf_hosts.run(_get, f"http://{NAME}:{ssrf_hosts.port}/x")

    # then the request went straight to the checked address, with no netrc credentials
    assert ssrf_hosts.internal_hits() == []
    assert [h["authorization"] for h in ssrf_hosts.public.hits] == [None]


def test_adapter_refuses_a_host_it_did_not_check() -> None:
    adapter = outbound.PinnedAdapter(Destination(host="a.example.test", port=80, addresses=()))
    with requests.Session() as session:
        session.trust_env = False
        session.mount("http://", adapter)
        with pytest.raises(requests.exceptions.InvalidURL, match="not the checked destination"):
            session.get("http://b.example.test/", timeout=1)


# --- TLS: the name, not the address, is what the certificate must match -------

TLS_NAME = "csv.example.test"


@pytest.fixture(scope="module")
def tls_ca(tmp_path_factory: pytest.TempPathFactory) -> Any:
    trustme = pytest.importorskip("trustme")
    return trustme.CA()


@pytest.fixture
def tls_host(ssrf_hosts: SsrfHosts, tls_ca: Any, tmp_path: Path) -> Iterator[tuple[Any, str]]:
    """(an HTTPS server on the public address with a certificate for TLS_NAME, the CA bundle path)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls_ca.issue_cert(TLS_NAME).configure_cert(context)
    server = HostServer(PUBLIC_ADDRESS, body=PUBLIC_BODY, netns=ssrf_hosts.netns, tls=context)
    bundle = tmp_path / "ca.pem"
    tls_ca.cert_pem.write_to_path(str(bundle))
    try:
        yield server, str(bundle)
    finally:
        server.stop()


def test_tls_to_a_pinned_address_verifies_the_name(
    ssrf_hosts: SsrfHosts, rebinding_dns: Callable[..., Any], tls_host: tuple[Any, str]
) -> None:
    server, bundle = tls_host
    rebinding_dns({TLS_NAME: [[PUBLIC_ADDRESS], ["127.0.0.1"]]})

    status, body = ssrf_hosts.run(_get, f"https://{TLS_NAME}:{server.port}/x", verify=bundle)

    assert (status, body) == (200, PUBLIC_BODY)
    assert [(h["host"], h["sni"]) for h in server.hits] == [(f"{TLS_NAME}:{server.port}", TLS_NAME)]


def test_tls_certificate_for_another_name_is_refused(
    ssrf_hosts: SsrfHosts, rebinding_dns: Callable[..., Any], tls_host: tuple[Any, str]
) -> None:
    server, bundle = tls_host
    rebinding_dns({"other.example.test": [[PUBLIC_ADDRESS]]})

    with pytest.raises(requests.exceptions.SSLError, match="other.example.test"):
        ssrf_hosts.run(_get, f"https://other.example.test:{server.port}/x", verify=bundle)
    assert server.hits == []


def test_tls_certificate_from_an_unknown_ca_is_refused_by_default(
    ssrf_hosts: SsrfHosts, rebinding_dns: Callable[..., Any], tls_host: tuple[Any, str]
) -> None:
    server, _bundle = tls_host
    rebinding_dns({TLS_NAME: [[PUBLIC_ADDRESS]]})

    with pytest.raises(requests.exceptions.SSLError, match="CERTIFICATE_VERIFY_FAILED"):
        ssrf_hosts.run(_get, f"https://{TLS_NAME}:{server.port}/x")
    assert server.hits == []
