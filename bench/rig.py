"""A `Rig` is one platform for `python -m bench`, and `Options` the command line they share.

A Rig has its database (a fresh PostgreSQL database, or a SQLite file), a
Redis database number on the run's one redis-server, a token, and the
Procfile's processes started through devstack's `Stack`. Stock Celery runs
from `bench.stock_app` on the same redis-server (bench.stock_worker).
"""

from __future__ import annotations

import sqlite3
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psycopg
import redis

from bench.http_load import LoadResult, http_load
from devstack.postgres import POSTGRES_DEFAULT_URL, create_database, drop_database
from devstack.processes import Process, Stack
from devstack.services import RedisServer, free_port, wait_for

TOKEN_SCRIPT = (
    "from django.contrib.auth.models import User; from rest_framework.authtoken.models import "
    "Token; u, _ = User.objects.get_or_create(username='bench'); "
    "print('TOKEN=' + Token.objects.get_or_create(user=u)[0].key)"
)


class Closable(Protocol):
    """A platform or baseline a benchmark started (Rig, bench.anchor_rig.Anchor)."""

    def close(self) -> None: ...


@dataclass
class Options:
    """The command line, as the benchmarks read it. Sizes are counts; `quick` shrinks them."""

    quick: bool
    runs: int
    jobs: int
    dbs: list[str]
    admin_url: str
    logroot: Path
    redis: RedisServer
    pending: int = 20_000
    recycles: int = 1000
    web_recycles: int = 100
    requests: int = 3000
    clients: int = 8
    # Seconds of RSS samples behind each memory figure.
    settle: float = 2.0
    # Remarks a benchmark wants printed and recorded under the table.
    notes: list[str] = field(default_factory=list)
    # Every Rig made, so the caller closes them even when a benchmark fails midway.
    rigs: list[Closable] = field(default_factory=list)
    _next_db: list[int] = field(default_factory=lambda: [0])

    def redis_url(self) -> str:
        """A Redis database of its own on the run's server (0..15, then shared again)."""
        number = self._next_db[0] % 16
        self._next_db[0] += 1
        return f"redis://127.0.0.1:{self.redis.port}/{number}"


@contextmanager
def standalone(prefix: str, *, jobs: int = 0) -> Iterator[Options]:
    """Options for a measuring script outside `python -m bench` (bench.p2_cpu, bench.storm_cpu).

    One PostgreSQL run (the default server), a redis-server of its own and
    a log directory named `prefix`; every Rig made with them is closed and
    the redis-server stopped on the way out.
    """
    redis_server = RedisServer().start()
    opts = Options(
        quick=False,
        runs=1,
        jobs=jobs,
        dbs=["postgres"],
        admin_url=POSTGRES_DEFAULT_URL,
        logroot=Path(tempfile.mkdtemp(prefix=prefix)),
        redis=redis_server,
    )
    try:
        yield opts
    finally:
        for made in opts.rigs:
            made.close()
        redis_server.stop()


class Rig:
    """One platform on `db` ("postgres" or "sqlite"): database, Redis db, token, processes."""

    def __init__(
        self,
        opts: Options,
        name: str,
        *,
        db: str = "postgres",
        env: dict[str, str] | None = None,
        settings: str = "config.settings.local",
    ) -> None:
        self.opts = opts
        opts.rigs.append(self)
        self.db = db
        self.name = f"bench_{name}_{db}_{time.time_ns() % 10**9}"
        self.logdir = opts.logroot / self.name
        self.logdir.mkdir(parents=True, exist_ok=True)
        if db == "postgres":
            self.database_url = create_database(self.name, admin_url=opts.admin_url)
        elif db == "sqlite":
            self.database_url = f"sqlite:///{(self.logdir / 'db.sqlite3').resolve()}"
        else:
            raise ValueError(f"unknown database {db!r} (postgres or sqlite)")
        self.redis_url = opts.redis_url()
        self.redis = redis.Redis.from_url(self.redis_url)
        self.redis.flushdb()
        self.worker_metrics_port = free_port()
        self.stack = Stack(
            env={
                "DJANGO_SETTINGS_MODULE": settings,
                "DJANGO_DEBUG": "false",
                "LOG_LEVEL": "INFO",
                "DATABASE_URL": self.database_url,
                "REDIS_URL": self.redis_url,
                "CELERY_BROKER_URL": self.redis_url,
                "JOBS_METRICS_DIR": str(self.logdir / "metrics"),
                "JOBS_WORKER_METRICS_PORT": str(self.worker_metrics_port),
                "JOBS_SCHEDULER_METRICS_PORT": str(free_port()),
                # Backpressure must not refuse the benchmark's own backlog.
                "JOBS_QUEUE_MAX_READY": "10000000",
                # One token submits thousands of jobs a second: far above the API's
                # default rate limits (config/settings/security.py), still counted.
                "JOBS_API_RATE_PER_TOKEN": "10000/s",
                "JOBS_API_RATE_PER_ADDRESS": "10000/s",
                **(env or {}),
            },
            logdir=self.logdir,
        )
        self.stack.run(["python", "manage.py", "migrate", "--no-input"], timeout=300)
        out = self.stack.run(["python", "manage.py", "shell", "-c", TOKEN_SCRIPT]).stdout
        self.token = next(line[6:] for line in out.splitlines() if line.startswith("TOKEN="))
        self.web_port = 0
        self._pg: psycopg.Connection | None = None

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Token {self.token}"}

    def start_web(self) -> Process:
        """gunicorn as shipped (config/gunicorn.py: 2 workers × 4 threads)."""
        self.web_port = free_port()
        return self.stack.start_web(self.web_port, workers=2, threads=4, timeout=120)

    def submit(self, count: int, body: dict[str, Any], *, clients: int = 8) -> LoadResult:
        """POST /api/jobs/ `count` times; raises if any answer is not 2xx."""
        result = http_load(
            self.web_port,
            "POST",
            "/api/jobs/",
            total=count,
            clients=clients,
            body=body,
            headers=self.auth,
        )
        if result.errors:
            raise RuntimeError(
                f"{result.errors} of {count} submissions failed; logs in {self.logdir}"
            )
        return result

    def scalar(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        """First column of the first row of `sql` (PostgreSQL: one kept connection)."""
        if self.db == "sqlite":
            path = self.database_url.removeprefix("sqlite:///")
            with sqlite3.connect(path, timeout=30) as conn:
                row = conn.execute(sql.replace("%s", "?"), params).fetchone()
            return row[0] if row else None
        if self._pg is None:
            dsn = self.database_url.replace("postgres://", "postgresql://", 1)
            self._pg = psycopg.connect(dsn, autocommit=True)
        row = self._pg.execute(sql, params).fetchone()
        return row[0] if row else None

    def finished_attempts(self) -> int:
        return int(self.scalar("SELECT count(*) FROM jobs_attempt WHERE finished_at IS NOT NULL"))

    def wait_attempts(self, total: int, *, timeout: float) -> float:
        """perf_counter time when at least `total` attempts were recorded as finished."""
        wait_for(
            lambda: self.finished_attempts() >= total,
            timeout=timeout,
            interval=0.05,
            what=f"{total} finished attempts ({self.logdir})",
        )
        return time.perf_counter()

    def close(self) -> None:
        """Stop every process by pid, drop the database (once)."""
        if self in self.opts.rigs:
            self.opts.rigs.remove(self)
        self.stack.stop()
        if self._pg is not None:
            self._pg.close()
        self.redis.close()
        if self.db == "postgres":
            drop_database(self.name, admin_url=self.opts.admin_url)
