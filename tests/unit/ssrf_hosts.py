"""Hosts for the SSRF unit tests: a public server and internal ones, real sockets in a namespace.

`ssrf_hosts_started()` makes a network namespace of its own (devstack.netns)
whose loopback holds a public address (PUBLIC_ADDRESS) and the cloud
metadata address besides 127.0.0.1 and ::1, and serves on one port: the
public server there with PUBLIC_BODY, internal servers on 127.0.0.1, ::1
and 169.254.169.254 with INTERNAL_BODY. Code run with `SsrfHosts.run` sees
only these. Root only; the fixtures in conftest.py skip otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from devstack.netns import HostServer, Netns

PUBLIC_ADDRESS = "93.184.216.34"
METADATA_ADDRESS = "169.254.169.254"
# What a rebinding name may turn into: loopback, cloud metadata, IPv6
# loopback, IPv4-mapped IPv6 loopback (reaches the 127.0.0.1 server).
INTERNAL_ANSWERS = ("127.0.0.1", METADATA_ADDRESS, "::1", "::ffff:127.0.0.1")
PUBLIC_BODY = b"public_column\n1\n2\n"
INTERNAL_BODY = b"internal_secret_column\nDJANGO_SECRET_KEY=internal-only\n"


@dataclass
class SsrfHosts:
    """The namespace and its servers; `run(fn, ...)` calls fn inside the namespace."""

    netns: Netns
    port: int
    public: HostServer
    internal: list[HostServer]

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self.netns.run(fn, *args, **kwargs)

    def internal_hits(self) -> list[dict[str, Any]]:
        return [hit for server in self.internal for hit in server.hits]

    def clear(self) -> None:
        for server in (self.public, *self.internal):
            server.hits.clear()


@contextmanager
def ssrf_hosts_started() -> Iterator[SsrfHosts]:
    space = Netns()
    servers: list[HostServer] = []
    try:
        space.add_loopback_addresses(PUBLIC_ADDRESS, METADATA_ADDRESS)
        public = HostServer(PUBLIC_ADDRESS, body=PUBLIC_BODY, netns=space)
        servers.append(public)
        for address in ("127.0.0.1", "::1", METADATA_ADDRESS):
            servers.append(HostServer(address, public.port, body=INTERNAL_BODY, netns=space))
        yield SsrfHosts(netns=space, port=public.port, public=public, internal=servers[1:])
    finally:
        for server in servers:
            server.stop()
        space.close()
