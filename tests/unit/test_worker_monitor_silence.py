"""The worker monitor replaces a subscription that went silent without an error.

A partition that heals without a reset, or a proxy that holds data, leaves
the monitor's Redis connection open and quiet: no error is ever raised, so
`celery_worker_up` would read 0 for live workers for good. Through a TCP
proxy of this test that stops forwarding on the connections it holds
(they stay open; new ones work), the monitor must reconnect on silence
and see the workers' heartbeats again.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest
from celery import Celery
from django.conf import settings

from devstack.services import RedisServer, wait_for
from observability.worker_monitor import WorkerMonitor


class MutingProxy:
    """Forwards 127.0.0.1:`port` to `upstream`; `mute()` silences the current connections."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.muted: set[int] = set()  # ids of connection pairs that forward nothing more
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream))
            with self.lock:
                self.pairs.append((client, upstream))
                pair = len(self.pairs) - 1
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(pair, src, dst), daemon=True).start()

    def _pump(self, pair: int, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if pair not in self.muted:
                    dst.sendall(data)

    def mute(self) -> int:
        """Stop forwarding on every connection open now (they stay open); returns how many."""
        with self.lock:
            self.muted.update(range(len(self.pairs)))
            return len(self.pairs)

    def close(self) -> None:
        self.server.close()
        with self.lock:
            for pair in self.pairs:
                for sock in pair:
                    sock.close()


@pytest.fixture
def proxy(private_broker: RedisServer) -> Iterator[MutingProxy]:
    proxy = MutingProxy(private_broker.port)
    try:
        yield proxy
    finally:
        proxy.close()


def test_worker_monitor_reconnects_when_its_subscription_goes_silent(
    private_broker: RedisServer, proxy: MutingProxy
) -> None:
    # given the monitor following worker events through the proxy (offline after 4 s)
    through_proxy = Celery("silence", broker=f"redis://127.0.0.1:{proxy.port}/0")
    # the platform's broker options (socket timeouts), as the scheduler's app has them
    through_proxy.conf.broker_transport_options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
    direct = Celery("silence-direct", broker=private_broker.url, set_as_current=False)
    monitor = WorkerMonitor(through_proxy, offline_after=4, reconnect_max=0.2).start()

    def heartbeat(node: str) -> bool:
        with direct.connection_for_write() as connection:
            direct.events.Dispatcher(connection, hostname=node).send("worker-heartbeat")
        return True

    try:
        wait_for(lambda: monitor.connected, timeout=10, what="monitor connected")
        wait_for(
            lambda: heartbeat("worker@before") and "before" in monitor.snapshot(),
            timeout=10,
            interval=0.2,
            what="a heartbeat seen",
        )

        # when its connection stops delivering, with no error (a silent partition)
        assert proxy.mute() >= 1

        # then it reconnects on its own and sees the live worker's heartbeats again
        wait_for(
            lambda: heartbeat("worker@after") and "after" in monitor.snapshot(),
            timeout=20,
            interval=0.5,
            what="a heartbeat seen after the silence",
        )
        assert monitor.snapshot()["after"][0] == 1
    finally:
        monitor.stop()
        through_proxy.close()
        direct.close()
