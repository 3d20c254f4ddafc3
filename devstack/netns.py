"""Linux network namespaces for tests: hosts with addresses this machine does not have.

The SSRF tests need a "public" server (a globally routable address) and
"internal" ones (127.0.0.1, ::1, 169.254.169.254) that are real sockets,
without touching the machine's own addresses:

* `Netns` is a namespace of our own (`ip netns add`); `run(fn)` calls `fn`
  in a thread that joined it, so sockets made there (servers, and the
  client's own connects) live in it. Addresses added to its loopback
  interface are reachable only from inside.
* `PublicHost` is a namespace holding one public address, reached from the
  machine's own namespace through a veth pair and a /32 route, so processes
  started normally (a worker) connect to it.

Root only (tests skip otherwise). Everything is removed by `close()`.
"""

from __future__ import annotations

import ctypes
import os
import random
import signal
import socket
import ssl
import subprocess
import threading
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

T = TypeVar("T")

CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
# Public addresses a test may borrow (example.com's old /24: routed on the
# internet, never by this machine); picked at random so parallel runs differ.
PUBLIC_PREFIX = "93.184.216."


def available() -> str | None:
    """Why network namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if subprocess.run(["ip", "-V"], capture_output=True, check=False).returncode != 0:
        return "iproute2 (`ip`) is not installed"
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {done.stderr.strip()}")


class Netns:
    """A network namespace named `name`, loopback up; `close()` deletes it."""

    def __init__(self, prefix: str = "jobs") -> None:
        self.name = f"{prefix}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        _ip("netns", "add", self.name)
        try:
            self.ip("link", "set", "lo", "up")
        except OSError:
            self.close()
            raise

    def ip(self, *args: str) -> None:
        """Run `ip -n <name> ARGS`; raises OSError with ip's message on failure."""
        _ip("-n", self.name, *args)

    def add_loopback_addresses(self, *addresses: str) -> None:
        """Add each address (/32 or /128) to the namespace's loopback interface."""
        for address in addresses:
            prefix = 128 if ":" in address else 32
            self.ip("addr", "add", f"{address}/{prefix}", "dev", "lo")

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` called in a thread inside this namespace; its result or exception."""
        outcome: dict[str, Any] = {}

        def target() -> None:
            try:
                _join(self.name)
                outcome["result"] = fn(*args, **kwargs)
            except BaseException as exc:  # handed to the caller's thread
                outcome["error"] = exc

        thread = threading.Thread(target=target, name=f"netns-{self.name}", daemon=True)
        thread.start()
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["result"]

    def close(self) -> None:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, check=False)


def _join(name: str) -> None:
    """Move the calling thread (only it) into namespace `name`."""
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        setns(fd)
    finally:
        os.close(fd)


def setns(fd: int) -> None:
    """Move the calling thread (only it) into the network namespace open at `fd` (a file
    of /run/netns or /proc/<pid>/ns/net); raises OSError with the reason."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when the thread that started it exits
    (PR_SET_PDEATHSIG), so a test's helper process never outlives the test."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class PublicHost(Netns):
    """A namespace with one public IPv4 address, routed to from the machine's namespace.

    `address` is reachable from every process on the machine while the host
    exists (a veth pair and a /32 route); servers bound inside with `run`
    answer there.
    """

    def __init__(self) -> None:
        super().__init__(prefix="jobs-pub")
        tag = uuid.uuid4().hex[:6]
        self.outer, inner = f"jpo{tag}", f"jpi{tag}"
        self.address = ""
        try:
            _ip("link", "add", self.outer, "type", "veth", "peer", "name", inner)
            _ip("link", "set", inner, "netns", self.name)
            link_local = f"169.254.{random.randint(1, 254)}.{random.randint(1, 254)}"
            _ip("addr", "add", f"{link_local}/32", "dev", self.outer)
            _ip("link", "set", self.outer, "up")
            self.ip("link", "set", inner, "up")
            self.ip("route", "add", f"{link_local}/32", "dev", inner)
            self.address = self._route_a_free_address(inner, link_local)
        except BaseException:
            self.close()
            raise

    def _route_a_free_address(self, inner: str, link_local: str) -> str:
        for _ in range(20):
            candidate = f"{PUBLIC_PREFIX}{random.randint(2, 250)}"
            try:
                _ip("route", "add", f"{candidate}/32", "dev", self.outer, "src", link_local)
            except OSError:
                continue  # another run holds it
            self.ip("addr", "add", f"{candidate}/32", "dev", inner)
            return candidate
        raise OSError(f"no free address in {PUBLIC_PREFIX}0/24 to route")

    def close(self) -> None:
        # Deleting the veth's outer end removes its route and the inner end too.
        if getattr(self, "outer", None):
            subprocess.run(["ip", "link", "del", self.outer], capture_output=True, check=False)
        super().close()


class HostServer:
    """An HTTP(S) server at `address`:`port` (inside `netns` when given) that records every request.

    Answers 302 to X for `/redirect?to=X` and 200 with `body` for anything
    else. `hits` holds one dict per request: method, path, host (the Host
    header), authorization and sni (the TLS server name, None over plain HTTP). `port` 0
    picks a free one. `stop()` shuts it down.
    """

    def __init__(
        self,
        address: str,
        port: int = 0,
        *,
        body: bytes,
        netns: Netns | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.address = address
        self.body = body
        self.hits: list[dict[str, Any]] = []
        server_names: list[str | None] = []
        if tls is not None:
            tls.sni_callback = lambda _sock, name, _ctx: server_names.append(name)
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                recorder.hits.append(
                    {
                        "method": self.command,
                        "path": self.path,
                        "host": self.headers.get("Host"),
                        "authorization": self.headers.get("Authorization"),
                        "sni": server_names[-1] if server_names else None,
                    }
                )
                if self.path.startswith("/redirect?to="):
                    self.send_response(302)
                    self.send_header("Location", self.path.split("=", 1)[1])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/csv")
                self.send_header("Content-Length", str(len(recorder.body)))
                self.end_headers()
                self.wfile.write(recorder.body)

            do_GET = do_POST = _answer  # noqa: N815 - http.server's names

        family = socket.AF_INET6 if ":" in address else socket.AF_INET

        class Server(ThreadingHTTPServer):
            address_family = family
            daemon_threads = True

        def bind() -> ThreadingHTTPServer:
            server = Server((address, port), Handler)
            if tls is not None:
                server.socket = tls.wrap_socket(server.socket, server_side=True)
            return server

        self._server = netns.run(bind) if netns is not None else bind()
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
