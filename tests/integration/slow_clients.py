"""Slow HTTP clients on real sockets, and a healthy one timing /healthz (issue 18, item 5).

Half of `SlowClients` trickle header lines and never end their header; the
other half send a whole header declaring `Content-Length: 200000` and then
8 bytes of body, and nothing more. A thread keeps the tricklers trickling
while the block runs:

    with SlowClients(("127.0.0.1", port), count=100, token=token) as slow:
        ...  # probe /healthz
        slow.still_open()  # how many the server has neither answered nor closed
"""

from __future__ import annotations

import errno
import socket
import threading
import time
from dataclasses import dataclass, field

import requests

DECLARED_BODY_BYTES = 200_000
SENT_BODY = b'{"kind":'  # 8 bytes of the 200,000 declared
TRICKLE_INTERVAL = 0.5


@dataclass
class SlowClients:
    """`count` slow connections to `address`: even ones trickle headers, odd ones stall a body.

    `token`: the API token the stalled POSTs carry (the API reads the body
    only for an authenticated request).
    """

    address: tuple[str, int]
    count: int
    token: str = ""
    path: str = "/api/jobs/"
    sockets: list[socket.socket] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def open(self) -> SlowClients:
        host = f"{self.address[0]}:{self.address[1]}"
        for number in range(self.count):
            sock = socket.create_connection(self.address, timeout=10)
            # Blocking from now on: still_open() peeks with MSG_DONTWAIT, which
            # a socket in timeout mode would turn into a wait of its timeout.
            sock.settimeout(None)
            if number % 2 == 0:
                sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n".encode())
            else:
                head = (
                    f"POST {self.path} HTTP/1.1\r\nHost: {host}\r\n"
                    f"Authorization: Token {self.token}\r\n"
                    "Content-Type: application/json\r\n"
                    f"Content-Length: {DECLARED_BODY_BYTES}\r\n\r\n"
                )
                sock.sendall(head.encode() + SENT_BODY)
            self.sockets.append(sock)
        self._thread = threading.Thread(target=self._trickle, daemon=True)
        self._thread.start()
        return self

    def _trickle(self) -> None:
        line = 0
        while not self._stop.wait(TRICKLE_INTERVAL):
            line += 1
            for sock in self.sockets[::2]:
                try:
                    sock.sendall(f"X-Trickle-{line}: slow\r\n".encode())
                except OSError:
                    pass  # closed by the server: it stays closed

    def still_open(self) -> int:
        """Connections the server has neither answered nor closed."""
        held = 0
        for sock in self.sockets:
            try:
                sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except BlockingIOError:
                held += 1  # nothing to read: still waiting for the rest of our request
            except OSError as exc:
                if exc.errno not in (errno.ECONNRESET, errno.EPIPE):
                    raise
            # else an answer (408, 413) or the end of the stream: not held
        return held

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for sock in self.sockets:
            sock.close()
        self.sockets.clear()

    def __enter__(self) -> SlowClients:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Probe:
    """One healthy GET /healthz: its status (None: timed out or failed) and seconds taken."""

    status: int | None
    seconds: float


def probe_healthz(base_url: str, *, count: int, timeout: float, interval: float) -> list[Probe]:
    """GET `base_url`/healthz `count` times, `interval` s apart, each on a new connection."""
    probes = []
    for number in range(count):
        if number:
            time.sleep(interval)  # pacing between probes, not synchronisation
        started = time.monotonic()
        try:
            status: int | None = requests.get(
                f"{base_url}/healthz", timeout=timeout, headers={"Connection": "close"}
            ).status_code
        except requests.RequestException:
            status = None
        probes.append(Probe(status, time.monotonic() - started))
    return probes
