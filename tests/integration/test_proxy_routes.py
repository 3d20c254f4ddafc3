"""Issue 18, item 5: what the proxy passes on, and when, seen from a recording upstream.

Debian's nginx with platform/nginx/'s template in front of a loopback HTTP
server that records every request it receives: the client's address is
appended to X-Forwarded-For (the app trusts exactly the last entry,
JOBS_TRUSTED_PROXY_COUNT=1), X-Forwarded-Proto and the client's Host are
set, and a request reaches the upstream only once its whole body has
arrived (request buffering), whatever the pace of the client.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
import requests

from devstack.loopback import LoopbackHTTPServer
from devstack.nginx import NginxServer
from devstack.services import free_port, wait_for

pytestmark = pytest.mark.integration


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Upstream:
    """A loopback server answering 200 to everything and recording each request."""

    requests: list[Recorded] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def serve(self) -> LoopbackHTTPServer:
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _record(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with upstream.lock:
                    upstream.requests.append(Recorded(self.path, dict(self.headers), body))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            do_GET = do_POST = _record

        return LoopbackHTTPServer(0, Handler)

    def count(self) -> int:
        with self.lock:
            return len(self.requests)


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[tuple[Upstream, NginxServer]]:
    recorder = Upstream()
    with recorder.serve() as server:
        address = f"127.0.0.1:{server.port}"
        proxy = NginxServer(port=free_port(), web=address, flower=address, workdir=tmp_path)
        with proxy:
            yield recorder, proxy


def test_the_proxy_appends_the_client_to_x_forwarded_for_and_sets_proto_and_host(
    upstream: tuple[Upstream, NginxServer],
) -> None:
    recorder, proxy = upstream
    # given a client that forges an X-Forwarded-For entry of its own
    response = requests.get(
        f"{proxy.url}/api/jobs/", headers={"X-Forwarded-For": "203.0.113.9"}, timeout=10
    )
    assert response.status_code == 200
    (seen,) = recorder.requests
    # then the last entry is the address nginx saw (the one the app may trust)
    assert seen.headers["X-Forwarded-For"] == "203.0.113.9, 127.0.0.1"
    assert seen.headers["X-Forwarded-Proto"] == "http"
    # and the Host keeps its port (absolute URLs in API answers)
    assert seen.headers["Host"] == f"127.0.0.1:{proxy.port}"
    assert seen.path == "/api/jobs/"


def test_a_request_reaches_the_upstream_only_with_its_whole_body(
    upstream: tuple[Upstream, NginxServer],
) -> None:
    recorder, proxy = upstream
    body = b'{"kind": "webhook.deliver", "payload": {"url": "http://example.com/"}}' * 100
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
        # given a client that sends its header and half its body
        sock.sendall(
            (
                f"POST /api/jobs/ HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode()
            + body[: len(body) // 2]
        )
        # when nginx has read it (a request for another path, sent after, is served first)
        assert requests.get(f"{proxy.url}/healthz", timeout=10).status_code == 200
        wait_for(lambda: recorder.count() == 1, timeout=10, what="the /healthz request")
        # then the upstream has not seen the POST yet
        assert [r.path for r in recorder.requests] == ["/healthz"]
        # and once the rest arrives it gets the whole body at once
        sock.sendall(body[len(body) // 2 :])
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    posted = recorder.requests[1]
    assert (posted.path, posted.body) == ("/api/jobs/", body)
