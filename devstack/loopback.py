"""A threaded HTTP server on 127.0.0.1 for the stand-ins the devstack and the tests serve."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


class LoopbackHTTPServer:
    """Serves `handler` on 127.0.0.1:`port` (0: any free port) from a daemon thread.

    `start()` begins serving and returns the server; `stop()` shuts it down
    and closes the socket; as a context manager, both. Raises OSError when
    the port is taken.
    """

    def __init__(self, port: int, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        """The port it listens on (the one picked when 0 was asked)."""
        return self._server.server_address[1]

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
