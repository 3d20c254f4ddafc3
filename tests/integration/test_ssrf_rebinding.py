"""Issue 18 item 1 through a real worker: a rebinding name never gets a kind to an internal server.

The worker resolves the test's names through a hostile resolver (the shim
tests/integration/rebinding_dns/sitecustomize.py): the first answer is a
public address, every later one 127.0.0.1, ::1 or ::ffff:127.0.0.1. The
public address belongs to a network namespace routed from this machine
(devstack.netns.PublicHost) with a real server behind it; the internal
servers listen on this machine's loopback, on the same port. Private
destinations are refused, as in production.

Before jobs.kinds.outbound, the guard checked the first answer and requests
connected to the second: webhook.deliver hit the internal server and
report.csv_summary returned its body as the job's result.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devstack import netns
from devstack.services import free_port
from tests.integration.harness import Platform, PlatformFactory, require_postgres

pytestmark = pytest.mark.integration

SHIM = Path(__file__).with_name("rebinding_dns")
INTERNAL_ANSWERS = ("127.0.0.1", "::1", "::ffff:127.0.0.1")
PUBLIC_BODY = b"public_column\n1\n2\n"
INTERNAL_BODY = b"internal_secret_column\nDJANGO_SECRET_KEY=internal-only\n"


@dataclass
class Rebinding:
    platform: Platform
    port: int
    public: netns.HostServer
    internal: list[netns.HostServer]
    names: dict[str, str]  # case -> name
    dns_log: Path

    def url(self, case: str, path: str = "/x") -> str:
        return f"http://{self.names[case]}:{self.port}{path}"

    def lookups(self, name: str) -> list[dict[str, Any]]:
        lines = self.dns_log.read_text().splitlines() if self.dns_log.exists() else []
        return [entry for entry in map(json.loads, lines) if entry["name"] == name]


def _cases() -> list[str]:
    return [f"{kind}-{i}" for kind in ("hook", "csv") for i in range(len(INTERNAL_ANSWERS))] + [
        "source",
        "hop",
    ]


def _servers(host: netns.PublicHost) -> list[netns.HostServer]:
    """[public server on the public host, internal ones on 127.0.0.1 and ::1], all on one port."""
    for _ in range(20):
        port = free_port()
        started: list[netns.HostServer] = []
        try:
            started.append(netns.HostServer(host.address, port, body=PUBLIC_BODY, netns=host))
            for address in ("127.0.0.1", "::1"):
                started.append(netns.HostServer(address, port, body=INTERNAL_BODY))
        except OSError:  # the port is taken on one of them: another one
            for server in started:
                server.stop()
            continue
        return started
    raise RuntimeError("no port free on the public host and both loopbacks")


@pytest.fixture(scope="module")
def rebinding(_logroot: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rebinding]:
    reason = netns.available()
    if reason:
        pytest.skip(reason)
    require_postgres()
    host = netns.PublicHost()
    servers: list[netns.HostServer] = []
    factory = PlatformFactory(logroot=_logroot)
    try:
        servers = _servers(host)
        public, internal = servers[0], servers[1:]
        names = {case: f"{case}-{os.getpid()}.rebind.test" for case in _cases()}
        answers = {
            names[f"{kind}-{i}"]: [[host.address], [address]]
            for kind in ("hook", "csv")
            for i, address in enumerate(INTERNAL_ANSWERS)
        }
        answers[names["source"]] = [[host.address]]
        answers[names["hop"]] = [[host.address], ["127.0.0.1"]]
        dns_log = tmp_path_factory.mktemp("rebinding") / "dns.jsonl"
        platform = factory(
            "rebinding", env={"JOBS_ALLOW_PRIVATE_DESTINATIONS": "false"}, worker=False
        )
        path = os.pathsep.join(p for p in (str(SHIM), os.environ.get("PYTHONPATH", "")) if p)
        platform.worker = platform.stack.start_worker(
            concurrency=2,
            timeout=120,
            log_name="worker-rebinding",
            env={
                "PYTHONPATH": path,
                "JOBS_TEST_DNS_ANSWERS": json.dumps(answers),
                "JOBS_TEST_DNS_LOG": str(dns_log),
            },
        )
        yield Rebinding(
            platform=platform,
            port=public.port,
            public=public,
            internal=internal,
            names=names,
            dns_log=dns_log,
        )
    finally:
        factory.close()
        for server in servers:
            server.stop()
        host.close()


def _internal_hits(rebinding: Rebinding) -> list[dict[str, Any]]:
    return [hit for server in rebinding.internal for hit in server.hits]


@pytest.mark.parametrize("index", range(len(INTERNAL_ANSWERS)), ids=INTERNAL_ANSWERS)
def test_webhook_delivers_to_the_checked_address_only(rebinding: Rebinding, index: int) -> None:
    case = f"hook-{index}"
    job = rebinding.platform.wait_job(
        rebinding.platform.submit("webhook.deliver", {"url": rebinding.url(case)})
    )

    assert job["status"] == "succeeded", job
    assert _internal_hits(rebinding) == []
    name = rebinding.names[case]
    assert [h["host"] for h in rebinding.public.hits if h["host"].startswith(name)] == [
        f"{name}:{rebinding.port}"
    ]
    # one lookup, the public answer: the changing answers were never asked for again
    assert [entry["answer"] for entry in rebinding.lookups(name)] == [[rebinding.public.address]]


@pytest.mark.parametrize("index", range(len(INTERNAL_ANSWERS)), ids=INTERNAL_ANSWERS)
def test_csv_summary_result_holds_the_checked_server_body_only(
    rebinding: Rebinding, index: int
) -> None:
    case = f"csv-{index}"
    job = rebinding.platform.wait_job(
        rebinding.platform.submit("report.csv_summary", {"source": rebinding.url(case)})
    )

    assert job["status"] == "succeeded", job
    assert [c["name"] for c in job["result"]["columns"]] == ["public_column"]
    assert "internal" not in json.dumps(job)
    assert _internal_hits(rebinding) == []
    assert len(rebinding.lookups(rebinding.names[case])) == 1


def test_csv_summary_redirect_hop_to_a_rebinding_name_is_pinned(rebinding: Rebinding) -> None:
    hop = rebinding.url("hop", "/data.csv")
    source = rebinding.url("source", f"/redirect?to={hop}")

    job = rebinding.platform.wait_job(
        rebinding.platform.submit("report.csv_summary", {"source": source})
    )

    assert job["status"] == "succeeded", job
    assert "internal" not in json.dumps(job)
    assert _internal_hits(rebinding) == []
    assert len(rebinding.lookups(rebinding.names["hop"])) == 1
