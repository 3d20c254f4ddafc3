"""A TCP proxy in front of a Redis that can stall: traffic is dropped, no side is closed.

A broker behind a partition, a frozen host or a proxy that lost its state
looks like this to its clients: connections stay open, bytes are accepted
(the kernel acknowledges them), no answer ever comes, and no error is
raised. `StallProxy.stall()` makes every connection behave so, and every
connection opened while stalled too (accepted, as a kernel completes
handshakes, but never passed on): nothing is forwarded either way and
nothing is closed. `resume()` makes the broker answer again for
connections opened from then on; a connection that lived through the stall
stays silent for good (its traffic was dropped, as across a partition that
healed after the routers forgot it), so a client recovers only by noticing
and reconnecting, which is what the proxy measures.

The proxy keeps reading (and dropping) what clients send while stalled, so
it sees the moment each client gives up on a connection (closes it): when
the client *detected* the stall. `Link` records, per client connection,
the commands it sent (RESP command names), when it began waiting for the
broker, and when it closed; `owner_pids()` maps live links to the process
that holds them (psutil).

One thread serves every socket (selectors); `stall`, `resume` and `close`
are safe from any thread.
"""

from __future__ import annotations

import contextlib
import re
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field

import psutil

# The command name of a RESP request: "*<n>\r\n$<len>\r\n<NAME>\r\n".
_COMMAND = re.compile(rb"\*\d+\r\n\$\d+\r\n([A-Za-z]+)\r\n")
# A client that sent one of these waits for the broker until it answers,
# however idle it looks (a blocking pop, a subscription).
BLOCKING_COMMANDS = frozenset({"BRPOP", "BLPOP", "BLMOVE", "BZPOPMIN", "BZPOPMAX", "XREAD"})
SUBSCRIBE_COMMANDS = frozenset({"SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE"})


@dataclass
class Link:
    """One client connection as the proxy saw it; times are time.monotonic() seconds."""

    client: socket.socket
    client_port: int
    opened_at: float
    upstream: socket.socket | None = None
    commands: list[str] = field(default_factory=list)
    muted: bool = False  # lived through a stall: its traffic is dropped for good
    # Whether it was waiting on the broker when the stall began: subscribed,
    # blocked in a pop, or with a request the broker had not answered yet.
    waiting_when_muted: bool = False
    last_sent_at: float = 0.0  # client -> broker, last byte sent (forwarded or dropped)
    last_answered_at: float = 0.0  # broker -> client, last forwarded byte
    waiting_since: float | None = None  # first client byte once muted: it awaits an answer
    closed_at: float | None = None
    closed_by: str = ""  # "client" or "broker"
    pid: int | None = None
    _tail: bytes = b""

    @property
    def subscribed(self) -> bool:
        return any(c in SUBSCRIBE_COMMANDS for c in self.commands)

    def wait_began(self, stalled_at: float) -> float | None:
        """When this client began waiting on a stalled broker (None: it awaited nothing).

        From the stall itself when it was subscribed, blocked, or had a
        request out that the stall kept unanswered; else from the first
        byte it sent once muted.
        """
        if self.waiting_when_muted and self.opened_at <= stalled_at:
            return stalled_at
        return self.waiting_since

    def _note(self, data: bytes, now: float) -> None:
        text = self._tail + data
        self.commands.extend(m.decode().upper() for m in _COMMAND.findall(text))
        self._tail = text[-64:]
        self.last_sent_at = now


class StallProxy:
    """Forwards 127.0.0.1:`port` to 127.0.0.1:`upstream_port` until told to stall."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._server = socket.create_server(("127.0.0.1", 0), backlog=256)
        self._server.setblocking(False)
        self.port: int = self._server.getsockname()[1]
        self.links: list[Link] = []
        self.stalled_at: float | None = None
        self.resumed_at: float | None = None
        self._lock = threading.RLock()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._server, selectors.EVENT_READ, None)
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="stall-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def stalled(self) -> bool:
        return self.stalled_at is not None and self.resumed_at is None

    def start(self) -> StallProxy:
        self._thread.start()
        return self

    # -- control (any thread) -------------------------------------------------

    def stall(self) -> float:
        """Drop all traffic of every open connection, and of new ones; returns the monotonic time."""
        with self._lock:
            self.stalled_at, self.resumed_at = time.monotonic(), None
            for link in self.links:
                if link.closed_at is None:
                    self._mute(link)
            return self.stalled_at

    def resume(self) -> float:
        """Pass on connections opened from now on; returns the monotonic time."""
        with self._lock:
            self.resumed_at = time.monotonic()
            return self.resumed_at

    def owner_pids(self) -> None:
        """Fill in `pid` of every open link (one scan of the host's TCP sockets)."""
        with self._lock:
            wanted = {link.client_port: link for link in self.links if link.pid is None}
        if not wanted:
            return
        for conn in psutil.net_connections(kind="tcp"):
            if not conn.raddr or conn.raddr.port != self.port or conn.pid is None:
                continue
            link = wanted.get(conn.laddr.port)
            if link is not None:
                link.pid = conn.pid

    def close(self) -> None:
        """Close the listener and every connection; stops the thread."""
        with self._lock:
            self._closed = True
            for link in self.links:
                for sock in (link.client, link.upstream):
                    if sock is not None:
                        with contextlib.suppress(OSError):
                            sock.close()
            with contextlib.suppress(OSError):
                self._server.close()
        self._thread.join(timeout=5)
        self._selector.close()

    # -- the serving thread ---------------------------------------------------

    def _serve(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                events = self._selector.select(timeout=0.02)
                for key, _ in events:
                    if key.data is None:
                        self._accept()
                    else:
                        link, side = key.data
                        self._readable(link, side)
            if not events:
                time.sleep(0.01)  # let control calls take the lock

    def _accept(self) -> None:
        try:
            client, (_, port) = self._server.accept()
        except (BlockingIOError, OSError):
            return
        link = Link(client=client, client_port=port, opened_at=time.monotonic())
        self.links.append(link)
        if self.stalled:
            link.muted = True
        else:
            try:
                link.upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                client.close()
                link.closed_at, link.closed_by = time.monotonic(), "broker"
                return
            link.upstream.setblocking(False)
            self._selector.register(link.upstream, selectors.EVENT_READ, (link, "broker"))
        client.setblocking(False)
        self._selector.register(client, selectors.EVENT_READ, (link, "client"))

    def _readable(self, link: Link, side: str) -> None:
        source = link.client if side == "client" else link.upstream
        assert source is not None
        try:
            data = source.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        now = time.monotonic()
        if not data:
            self._drop(link, side)
            return
        if side == "broker":
            link.last_answered_at = now
            self._send(link, link.client, data)
            return
        link._note(data, now)
        if link.muted or link.upstream is None:
            if link.waiting_since is None:
                link.waiting_since = now
        else:
            self._send(link, link.upstream, data)

    def _send(self, link: Link, target: socket.socket, data: bytes) -> None:
        try:
            target.setblocking(True)
            target.sendall(data)
            target.setblocking(False)
        except OSError:
            self._drop(link, "client" if target is link.client else "broker")

    def _mute(self, link: Link) -> None:
        link.muted = True
        last = link.commands[-1] if link.commands else ""
        link.waiting_when_muted = (
            link.subscribed
            or last in BLOCKING_COMMANDS
            or link.last_sent_at > link.last_answered_at
        )
        if link.upstream is not None:
            # Not read any more: what the broker sends it is never passed on.
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(link.upstream)

    def _drop(self, link: Link, side: str) -> None:
        if link.closed_at is None:
            link.closed_at, link.closed_by = time.monotonic(), side
        for sock in (link.client, link.upstream):
            if sock is None:
                continue
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(sock)
            with contextlib.suppress(OSError):
                sock.close()
