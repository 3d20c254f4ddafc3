"""A hostile resolver for tests: a name whose answers change on every lookup (DNS rebinding, TTL 0).

`RebindingResolver` replaces `socket.getaddrinfo` for the names it knows:
the n-th lookup of a name (in this process) gets the n-th answer list of
that name, the last list repeating; any other name, and every numeric
address, goes to the real resolver. Both the guard's lookup and any lookup
the HTTP client might make go through it, as they would through a real
resolver.

In a test process, `install()` / `uninstall()`; in a worker, the shim in
tests/integration/rebinding_dns/sitecustomize.py installs it from
JOBS_TEST_DNS_ANSWERS (JSON: {name: [[addresses], [addresses], ...]}) and
appends one line per lookup to JOBS_TEST_DNS_LOG.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

GetAddrInfo = Callable[..., list[tuple[Any, ...]]]


class RebindingResolver:
    """getaddrinfo answering `answers[name][n]` on the n-th lookup of `name` (last one repeats)."""

    def __init__(self, answers: Mapping[str, Sequence[Sequence[str]]], *, log: str = "") -> None:
        self.answers = {
            name.lower().rstrip("."): [list(a) for a in lists] for name, lists in answers.items()
        }
        self.lookups: list[tuple[str, list[str]]] = []
        self.log = log
        self._lock = threading.Lock()
        self._real: GetAddrInfo = socket.getaddrinfo

    def install(self) -> RebindingResolver:
        self._real = socket.getaddrinfo
        socket.getaddrinfo = self.getaddrinfo
        return self

    def uninstall(self) -> None:
        socket.getaddrinfo = self._real

    def count(self, name: str) -> int:
        """Lookups of `name` so far (in this process)."""
        return sum(1 for looked_up, _ in self.lookups if looked_up == name)

    def getaddrinfo(
        self, host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0
    ) -> list[tuple[Any, ...]]:
        key = host.decode() if isinstance(host, bytes) else str(host or "")
        key = key.lower().rstrip(".")
        if key not in self.answers or flags & socket.AI_NUMERICHOST:
            # Not ours, or a numeric-only parse (which never asks a resolver).
            return self._real(host, port, family, type, proto, flags)
        with self._lock:
            lists = self.answers[key]
            addresses = lists[min(self.count(key), len(lists) - 1)]
            self.lookups.append((key, addresses))
        if self.log:
            with open(self.log, "a", encoding="utf-8") as handle:
                handle.write(
                    json.dumps({"pid": os.getpid(), "name": key, "answer": addresses}) + "\n"
                )
        infos = []
        for address in addresses:
            af = socket.AF_INET6 if ":" in address else socket.AF_INET
            if family not in (0, socket.AF_UNSPEC, af):
                continue
            sockaddr = (
                (address, int(port or 0), 0, 0)
                if af == socket.AF_INET6
                else (address, int(port or 0))
            )
            infos.append(
                (af, type or socket.SOCK_STREAM, proto or socket.IPPROTO_TCP, "", sockaddr)
            )
        if not infos:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return infos


def install_from_env() -> RebindingResolver | None:
    """Install a resolver from JOBS_TEST_DNS_ANSWERS / JOBS_TEST_DNS_LOG, or None when unset."""
    raw = os.environ.get("JOBS_TEST_DNS_ANSWERS", "")
    if not raw:
        return None
    return RebindingResolver(json.loads(raw), log=os.environ.get("JOBS_TEST_DNS_LOG", "")).install()
