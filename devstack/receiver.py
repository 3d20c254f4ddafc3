"""A webhook receiver on loopback for the demo and the tests.

Behaviour is chosen per request by the URL path:

    /ok                      200
    /status/<code>           that status; `?retry_after=N` adds Retry-After: N
    /flaky?fail=0.3&slow=0.1&slow_seconds=2&seed=...
                             fails a share `fail` of deliveries with 500/503,
                             answers a share `slow` after `slow_seconds`
                             (a client read timeout), otherwise 200
    /gone                    410 (permanent)

Every request is recorded as a Delivery (path, job id, attempt, time), so a
test can check who called and when.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlparse

from devstack.loopback import LoopbackHTTPServer


@dataclass(frozen=True)
class Delivery:
    """One received request. `at` is time.time() when it arrived."""

    path: str
    job_id: str
    attempt: int
    idempotency_key: str
    at: float
    status: int


class WebhookReceiver(LoopbackHTTPServer):
    """Threaded HTTP server on 127.0.0.1:`port` (0 = any free port).

    Use as a context manager or call start()/stop(). `deliveries` is the
    list of Delivery records, appended under a lock.
    """

    def __init__(self, port: int = 0, *, seed: int | None = None) -> None:
        self.deliveries: list[Delivery] = []
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                status, headers, delay = receiver._decide(self.path)
                if delay:
                    time.sleep(delay)
                receiver._record(self, status)
                body = b'{"ok": %s}' % (b"true" if status < 300 else b"false")
                try:
                    self.send_response(status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (read timeout): that was the point

            do_GET = do_POST

        super().__init__(port, Handler)

    def url(self, path: str) -> str:
        """Absolute URL of `path` on this receiver."""
        return f"http://127.0.0.1:{self.port}{path}"

    def _decide(self, raw_path: str) -> tuple[int, dict[str, str], float]:
        parsed = urlparse(raw_path)
        query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
        path = parsed.path
        if path == "/ok":
            return 200, {}, 0.0
        if path == "/gone":
            return 410, {}, 0.0
        if path.startswith("/status/"):
            code = int(path.rsplit("/", 1)[1])
            headers = {"Retry-After": query["retry_after"]} if "retry_after" in query else {}
            return code, headers, 0.0
        if path == "/flaky":
            fail, slow = float(query.get("fail", 0.3)), float(query.get("slow", 0.0))
            with self._lock:
                roll = self._rng.random()
            if roll < fail:
                return (503 if roll < fail / 2 else 500), {}, 0.0
            if roll < fail + slow:
                return 200, {}, float(query.get("slow_seconds", 2.0))
            return 200, {}, 0.0
        return 404, {}, 0.0

    def _record(self, handler: BaseHTTPRequestHandler, status: int) -> None:
        delivery = Delivery(
            path=urlparse(handler.path).path,
            job_id=handler.headers.get("X-Job-Id", ""),
            attempt=int(handler.headers.get("X-Job-Attempt") or 0),
            idempotency_key=handler.headers.get("Idempotency-Key", ""),
            at=time.time(),
            status=status,
        )
        with self._lock:
            self.deliveries.append(delivery)

    def deliveries_for(self, job_id: str) -> list[Delivery]:
        """Deliveries that carried X-Job-Id `job_id`, in arrival order."""
        with self._lock:
            return [d for d in self.deliveries if d.job_id == str(job_id)]
