"""Issue 18 item 1: DNS rebinding past the SSRF guard, for every kind that opens a URL.

A name answers a public address first and an internal one on every later
lookup (TTL 0). Before jobs.kinds.outbound, the guard checked the first
answer and the HTTP client connected to the second: webhook.deliver reached
the internal server and report.csv_summary returned its body. Now the one
lookup is the one connected to. Servers are real sockets in a namespace of
the test's own (tests/unit/conftest.py `ssrf_hosts`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from jobs.kinds import PermanentError
from jobs.kinds.csv_summary import CsvSummary
from jobs.kinds.webhook import WebhookDeliver
from tests.unit.ssrf_hosts import INTERNAL_ANSWERS, PUBLIC_ADDRESS, SsrfHosts


@pytest.mark.parametrize("internal", INTERNAL_ANSWERS)
def test_webhook_never_reaches_a_rebound_internal_address(
    ssrf_hosts: SsrfHosts,
    rebinding_dns: Callable[..., Any],
    attempt_context: Callable[..., Any],
    internal: str,
) -> None:
    name = "hooks.rebind.test"
    resolver = rebinding_dns({name: [[PUBLIC_ADDRESS], [internal]]})
    kind = WebhookDeliver()
    payload = kind.validate_payload({"url": f"http://{name}:{ssrf_hosts.port}/x"})

    result = ssrf_hosts.run(kind.run, payload, attempt_context())

    assert result["status_code"] == 200
    assert ssrf_hosts.internal_hits() == []
    assert [(h["method"], h["host"]) for h in ssrf_hosts.public.hits] == [
        ("POST", f"{name}:{ssrf_hosts.port}")
    ]
    assert resolver.count(name) == 1


@pytest.mark.parametrize("internal", INTERNAL_ANSWERS)
def test_csv_summary_never_returns_a_rebound_internal_body(
    ssrf_hosts: SsrfHosts,
    rebinding_dns: Callable[..., Any],
    attempt_context: Callable[..., Any],
    internal: str,
) -> None:
    name = "csv.rebind.test"
    rebinding_dns({name: [[PUBLIC_ADDRESS], [internal]]})
    kind = CsvSummary()
    payload = kind.validate_payload({"source": f"http://{name}:{ssrf_hosts.port}/data.csv"})

    result = ssrf_hosts.run(kind.run, payload, attempt_context())

    assert [c["name"] for c in result["columns"]] == ["public_column"]
    assert "internal" not in json.dumps(result)
    assert ssrf_hosts.internal_hits() == []


@pytest.mark.parametrize("internal", INTERNAL_ANSWERS)
def test_csv_summary_redirect_hop_is_checked_and_pinned(
    ssrf_hosts: SsrfHosts,
    rebinding_dns: Callable[..., Any],
    attempt_context: Callable[..., Any],
    internal: str,
) -> None:
    # given a source that redirects to a second name, which rebinds
    port = ssrf_hosts.port
    resolver = rebinding_dns(
        {
            "source.rebind.test": [[PUBLIC_ADDRESS]],
            "hop.rebind.test": [[PUBLIC_ADDRESS], [internal]],
        }
    )
    kind = CsvSummary()
    source = f"http://source.rebind.test:{port}/redirect?to=http://hop.rebind.test:{port}/data.csv"
    payload = kind.validate_payload({"source": source})

    # when it runs
    result = ssrf_hosts.run(kind.run, payload, attempt_context())

    # then both hops went to the public server, the hop's name looked up once
    assert "internal" not in json.dumps(result)
    assert ssrf_hosts.internal_hits() == []
    assert [h["host"] for h in ssrf_hosts.public.hits] == [
        f"source.rebind.test:{port}",
        f"hop.rebind.test:{port}",
    ]
    assert resolver.count("hop.rebind.test") == 1


@pytest.mark.parametrize("internal", INTERNAL_ANSWERS)
def test_csv_summary_redirect_to_an_internal_name_is_refused_before_it_is_requested(
    ssrf_hosts: SsrfHosts,
    rebinding_dns: Callable[..., Any],
    attempt_context: Callable[..., Any],
    internal: str,
) -> None:
    port = ssrf_hosts.port
    rebinding_dns({"source.rebind.test": [[PUBLIC_ADDRESS]], "hop.rebind.test": [[internal]]})
    kind = CsvSummary()
    source = f"http://source.rebind.test:{port}/redirect?to=http://hop.rebind.test:{port}/x"
    payload = kind.validate_payload({"source": source})

    with pytest.raises(PermanentError, match="non-public"):
        ssrf_hosts.run(kind.run, payload, attempt_context())
    assert len(ssrf_hosts.public.hits) == 1
    assert ssrf_hosts.internal_hits() == []
