"""Find or start PostgreSQL: the shared server, an embedded one, or a private cluster for fault tests."""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from devstack.services import free_port, stop_process, wait_for

logger = logging.getLogger(__name__)


POSTGRES_DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/postgres"


def postgres_reachable(url: str = POSTGRES_DEFAULT_URL) -> bool:
    """Whether PostgreSQL accepts a connection at `url`."""
    import psycopg  # noqa: PLC0415 - import cost: only when PostgreSQL is used

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
        return str(_embedded_postgres[1])
    try:
        import pgserver  # noqa: PLC0415 - optional dependency (pgserver, the test extra)
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


def create_database(
    name: str, *, admin_url: str = POSTGRES_DEFAULT_URL, template: str | None = None
) -> str:
    """Create database `name` (dropping an old one of that name); return its URL.

    With `template`, the new database is a copy of that one (PostgreSQL's
    CREATE DATABASE ... TEMPLATE: ~0.1 s, against ~2.5 s for `migrate`);
    nobody may be connected to the template meanwhile. Raises psycopg errors.
    """
    import psycopg  # noqa: PLC0415 - import cost: only when PostgreSQL is used

    copy = f' TEMPLATE "{template}"' if template else ""
    with psycopg.connect(_psycopg_dsn(admin_url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"{copy}')
    return database_url(admin_url, name)


def drop_database(name: str, *, admin_url: str = POSTGRES_DEFAULT_URL) -> None:
    """Drop database `name`, disconnecting its sessions."""
    import psycopg  # noqa: PLC0415 - import cost: only when PostgreSQL is used

    with psycopg.connect(_psycopg_dsn(admin_url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def postgres_bin_dir() -> Path:
    """Directory holding `initdb` and `postgres`: the newest Debian build, else pgserver's.

    Raises RuntimeError when neither is installed.
    """
    debian = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/postgres"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if debian:
        return debian[-1].parent
    try:
        import pgserver  # noqa: PLC0415 - optional dependency (pgserver, the test extra)
    except ImportError:
        raise RuntimeError("no PostgreSQL binaries: neither Debian's nor pgserver's") from None
    return Path(pgserver.__file__).parent / "pginstall" / "bin"


@dataclass
class PostgresServer:
    """A PostgreSQL cluster of our own on a spare TCP port, for tests that stop the server.

    Created with `initdb` in a temporary directory (trust auth, superuser
    `postgres`, fsync off); `postgres` runs as a child process we hold by
    pid, so `stop` can end it the way a crash or a failover would. Run as
    root it runs as the `postgres` system user (PostgreSQL refuses root).
    """

    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    datadir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="jobs-pg-"))
    bindir: Path | None = None  # None: postgres_bin_dir()

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def _user(self) -> str | None:
        """The system user to run as: None unless root; then `postgres`, else `pgserver`
        (created with useradd when missing, as the pgserver wheel does)."""

        if os.geteuid() != 0:
            return None
        for name in ("postgres", "pgserver"):
            try:
                pwd.getpwnam(name)
                return name
            except KeyError:
                continue
        subprocess.run(["useradd", "-s", "/bin/sh", "pgserver"], check=True, capture_output=True)
        return "pgserver"

    def start(self, *, timeout: float = 60) -> PostgresServer:
        """Create the cluster on the first call, start `postgres`; returns once it accepts connections.

        Raises RuntimeError (no binaries), subprocess.CalledProcessError
        (initdb failed) or TimeoutError (not accepting within `timeout` s).
        """
        bindir = self.bindir or postgres_bin_dir()
        user = self._user()
        data = Path(self.datadir)
        if not (data / "PG_VERSION").exists():
            if user is not None:
                shutil.chown(data, user=user)
            subprocess.run(
                [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-N"],
                check=True,
                capture_output=True,
                user=user,
                timeout=120,
            )
        log = open(data / "server.log", "ab")  # noqa: SIM115 - owned by the server process
        try:
            self.process = subprocess.Popen(
                [
                    str(bindir / "postgres"),
                    "-D",
                    str(data),
                    "-p",
                    str(self.port),
                    "-k",
                    str(data),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    "fsync=off",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                user=user,
            )
        finally:
            log.close()
        wait_for(
            lambda: postgres_reachable(self.url),
            timeout=timeout,
            what=f"postgres on port {self.port}",
        )
        return self

    def stop(self, *, mode: str = "fast", timeout: float = 30) -> None:
        """Stop the server by pid and wait for it to exit.

        `mode` is pg_ctl's: "smart" (SIGTERM: waits for clients), "fast"
        (SIGINT: ends sessions, clean shutdown) or "immediate" (SIGQUIT: no
        shutdown checkpoint, crash recovery at the next start). SIGKILL when
        it has not exited within `timeout` seconds.
        """
        sig = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}[mode]
        stop_process(self.process, sig=sig, timeout=timeout)
        self.process = None

    def destroy(self) -> None:
        """Stop the server and delete its data directory."""
        self.stop(mode="immediate")
        shutil.rmtree(self.datadir, ignore_errors=True)
