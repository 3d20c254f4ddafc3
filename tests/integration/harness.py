"""The integration harness: real Redis, PostgreSQL, gunicorn, worker and scheduler.

Every platform a test talks to is built by `PlatformFactory`: its own
redis-server on a spare port, its own freshly created PostgreSQL database
(a copy of one migrated once per session), a user with a DRF token, and
the Procfile's processes started through `devstack.processes.Stack`. Teardown
stops each process by pid, stops the redis-server and drops the database,
whether the test passed or not.

The fixtures in conftest.py wrap it; test modules import the constants and
types from here. The template database and users are made by
tests.integration.platform_seed.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kombu
import psycopg
import redis
import requests
from amqp import exceptions as amqp_exceptions

from config.env import env
from devstack.postgres import create_database, drop_database
from devstack.processes import Process, Stack
from devstack.rabbitmq import Vhost, rabbitmqctl
from devstack.services import RedisServer, free_port, wait_for
from devstack.stall_proxy import StallProxy
from tests.integration.platform_seed import (
    USERS_SCRIPT,
    migrated_template,
    require_postgres,
    require_rabbitmq,
)

# Policy overrides of the shared platform: demo.flaky retries quickly, so the
# retry tests take seconds. Tests read these numbers back from here.
FLAKY_POLICY = {"max_attempts": 5, "backoff_base": 0.5, "backoff_floor": 0.2, "backoff_cap": 2.0}

# Settings every platform gets. DEBUG off: with DEBUG on Django keeps every
# query in memory, which would show up as worker growth in the memory test.
BASE_ENV = {
    "DJANGO_SETTINGS_MODULE": "config.settings.local",
    "DJANGO_DEBUG": "false",
    "LOG_LEVEL": "INFO",
    "JOBS_SCHEDULER_INTERVAL": "0.1",
    "OTEL_SDK_DISABLED": "true",
    # A retry budget that never refuses (floor of a million retries per window):
    # tests of other things retry freely; budget tests set their own.
    "JOBS_RETRY_BUDGET_FLOOR": "1000000",
    # The shipped hourly prune schedule off: a test that counts its jobs must
    # not meet a prune job at minute 17 (the periodic and prune tests set theirs).
    "JOBS_SCHEDULES": '{"jobs.prune": {"enabled": false}}',
    # API rate limits far above what tests send (the fuzzers and concurrency
    # tests send hundreds of requests a second from one token and address, and
    # schemathesis sends malformed Authorization headers, which count as failed
    # authentications). test_rate_limits sets the limits it tests itself.
    "JOBS_API_RATE_PER_TOKEN": "10000/s",
    "JOBS_API_RATE_PER_ADDRESS": "10000/s",
    "JOBS_API_AUTH_FAILURE_RATE": "10000/s",
}

# The broker of a platform whose test names none: JOBS_IT_BROKER=rabbitmq runs
# any integration test on a vhost of its own (tests reading Redis internals fail).
DEFAULT_BROKER = env.str("JOBS_IT_BROKER", default="redis")
TERMINAL = frozenset({"succeeded", "dead", "cancelled"})
HTTP_TIMEOUT = 30
# Seconds a test's processes get between SIGTERM and SIGKILL at teardown.
TEARDOWN_STOP_SECONDS = 5.0


@dataclass
class Platform:
    """One running platform: its services, processes and an authenticated API client."""

    name: str
    stack: Stack
    redis: RedisServer
    database_url: str
    # The stalling proxy every process reaches Redis through (broker_proxy=True),
    # else None: the processes use `redis.url` directly.
    proxy: StallProxy | None = None
    # broker="rabbitmq": the platform's own vhost on the machine's RabbitMQ
    # (CELERY_BROKER_URL); Redis then keeps only the state not moved to
    # PostgreSQL yet (REDIS_URL, the retry budget).
    vhost: Vhost | None = None
    base_url: str = ""
    token: str = ""
    web: Process | None = None
    worker: Process | None = None
    scheduler: Process | None = None
    # The worker's /metrics (its main process), the scheduler's (its counters and
    # celery_worker_up); the web's is url("/metrics").
    worker_metrics_url: str = ""
    scheduler_metrics_url: str = ""
    session: requests.Session = field(default_factory=requests.Session)

    # -- the broker ----------------------------------------------------------------
    @property
    def broker_url(self) -> str:
        """CELERY_BROKER_URL of this platform's processes (Redis, its proxy, or a vhost)."""
        return self.stack.env["CELERY_BROKER_URL"]

    def broker_messages(self, queue: str = "default") -> tuple[int, int]:
        """(ready, unacknowledged) messages of `queue`, read from the broker itself.

        Redis: every priority sub-queue's list, and the unacked hash (all
        queues). RabbitMQ: ready by a passive declare (exact; `rabbitmqctl
        list_queues` reports a quorum queue's counts seconds late), unacknowledged
        from `rabbitmqctl` (seconds late: poll for it).
        """
        if self.vhost is not None:
            unacked = 0
            for row in self.vhost.queues():
                if row["name"] == queue:
                    unacked = int(row["messages_unacknowledged"])
            with kombu.Connection(self.vhost.url, connect_timeout=5) as connection:
                try:
                    ready = connection.default_channel.queue_declare(
                        queue=queue, passive=True
                    ).message_count
                except amqp_exceptions.NotFound:
                    return 0, 0
            return ready, unacked
        client = redis.Redis.from_url(self.redis.url)
        try:
            keys = [queue, *(f"{queue}\x06\x16{step}" for step in (3, 6, 9))]
            return sum(client.llen(key) for key in keys), client.hlen("unacked")
        finally:
            client.close()

    def purge(self, queue: str = "default") -> None:
        """Drop every ready message of `queue` from the broker (a flush, an operator's purge)."""
        if self.vhost is not None:
            rabbitmqctl("purge_queue", "-p", self.vhost.name, queue)
            return
        client = redis.Redis.from_url(self.redis.url)
        try:
            client.delete(queue, *(f"{queue}\x06\x16{step}" for step in (3, 6, 9)))
        finally:
            client.close()

    # -- HTTP -----------------------------------------------------------------
    def url(self, path: str) -> str:
        return f"{self.base_url}{path}"

    def post_job(self, body: Any, **kwargs: Any) -> requests.Response:
        """POST /api/jobs/ with the token; `body` is sent as JSON."""
        return self.session.post(self.url("/api/jobs/"), json=body, timeout=HTTP_TIMEOUT, **kwargs)

    def submit(self, kind: str, payload: dict[str, Any], **extra: Any) -> str:
        """Submit a job, assert 202, return its id."""
        response = self.post_job({"kind": kind, "payload": payload, **extra})
        assert response.status_code == 202, response.text
        return response.json()["id"]

    def job(self, job_id: str) -> dict[str, Any]:
        response = self.session.get(self.url(f"/api/jobs/{job_id}/"), timeout=HTTP_TIMEOUT)
        assert response.status_code == 200, response.text
        return response.json()

    def job_count(self, **filters: str) -> int:
        """`count` of GET /api/jobs/ with the given filters (status=, kind=)."""
        response = self.session.get(self.url("/api/jobs/"), params=filters, timeout=HTTP_TIMEOUT)
        assert response.status_code == 200, response.text
        return response.json()["count"]

    def wait_job(
        self, job_id: str, *, statuses: frozenset[str] = TERMINAL, timeout: float = 60
    ) -> dict[str, Any]:
        """Poll the job until its status is in `statuses`; return its last state."""
        last: dict[str, Any] = {}

        def reached() -> bool:
            last.update(self.job(job_id))
            return last["status"] in statuses

        try:
            wait_for(reached, timeout=timeout, interval=0.1, what=f"job {job_id} in {statuses}")
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\nlast state: {last}\n{self.log_tails()}") from None
        return last

    # -- direct reads -----------------------------------------------------------
    def scalar(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        """First column of the first row of `sql`, read with psycopg from this platform's database."""
        dsn = self.database_url.replace("postgres://", "postgresql://", 1)
        with psycopg.connect(dsn) as conn:
            return conn.execute(sql, params).fetchone()[0]

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Every row of `sql`, read with psycopg from this platform's database."""
        dsn = self.database_url.replace("postgres://", "postgresql://", 1)
        with psycopg.connect(dsn) as conn:
            return conn.execute(sql, params).fetchall()

    def row_count(self) -> int:
        """Rows in the jobs table, counted in the database itself."""
        return self.scalar("SELECT count(*) FROM jobs_job")

    def create_users(self, users: dict[str, dict[str, Any]]) -> dict[str, str]:
        """Create users {name: {"staff": bool, "perms": [codename], "password": str}}
        in one `manage.py shell`; returns {name: API token}."""
        out = self.stack.run(
            ["python", "manage.py", "shell", "-c", USERS_SCRIPT % json.dumps(users)],
            timeout=120,
        ).stdout
        for line in out.splitlines():
            if line.startswith("TOKENS="):
                return json.loads(line.removeprefix("TOKENS="))
        raise RuntimeError(f"no tokens in manage.py shell output:\n{out}")

    def log_tails(self, chars: int = 3000) -> str:
        """The end of every process log, for assertion messages."""
        return "\n".join(
            f"--- {p.name} (pid {p.pid}, {p.log_path}) ---\n{p.log()[-chars:]}"
            for p in self.stack.processes
        )


@dataclass
class PlatformFactory:
    """Builds platforms; `close()` tears down everything it built, newest first."""

    logroot: Path
    exits: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def __call__(
        self,
        name: str,
        *,
        env: dict[str, str] | None = None,
        web: bool = True,
        worker: bool = True,
        scheduler: bool = True,
        worker_concurrency: int = 2,
        broker_proxy: bool = False,
        broker: str | None = None,
    ) -> Platform:
        """A platform named `name` with `env` added to BASE_ENV; starts the chosen processes.

        With `broker_proxy`, every process reaches its Redis through a
        StallProxy (`platform.proxy`), which a test can stall and resume.
        `broker` "rabbitmq" puts the broker on a vhost of its own on the
        machine's RabbitMQ (skipped when none answers), deleted at teardown;
        its default, JOBS_IT_BROKER ("redis"), runs any test on RabbitMQ.
        """
        broker = broker or DEFAULT_BROKER
        db_name = f"jobs_it_{name}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        admin_url = require_postgres()
        template, token = migrated_template(admin_url, BASE_ENV)
        database_url = create_database(db_name, admin_url=admin_url, template=template)
        self.exits.callback(drop_database, db_name, admin_url=admin_url)
        redis_server = RedisServer().start()
        self.exits.callback(redis_server.stop)
        proxy = StallProxy(redis_server.port).start() if broker_proxy else None
        if proxy is not None:
            self.exits.callback(proxy.close)
        redis_url = proxy.url if proxy is not None else redis_server.url
        broker_url, vhost, state_redis_url = redis_url, None, redis_url
        if broker == "rabbitmq":
            vhost = require_rabbitmq(Vhost(name=db_name))
            self.exits.callback(vhost.delete)
            broker_url = vhost.url
            # A RabbitMQ deployment needs no Redis (issue 21): its shared state is
            # in PostgreSQL, and REDIS_URL names a port nobody listens on.
            state_redis_url = f"redis://127.0.0.1:{free_port()}/0"
        worker_metrics_port = free_port()
        scheduler_metrics_port = free_port()
        stack = Stack(
            env={
                **BASE_ENV,
                "DATABASE_URL": database_url,
                "REDIS_URL": state_redis_url,
                "CELERY_BROKER_URL": broker_url,
                # Per platform: parallel platforms must not share metrics files or a port.
                "JOBS_METRICS_DIR": str(self.logroot / db_name / "metrics"),
                "JOBS_WORKER_METRICS_PORT": str(worker_metrics_port),
                "JOBS_SCHEDULER_METRICS_PORT": str(scheduler_metrics_port),
                **(env or {}),
            },
            logdir=self.logroot / db_name,
        )
        # Registered after the services, so it runs first: processes stop by pid
        # before their Redis and database go away. A test's end needs no warm
        # shutdown: a worker still running an attempt is killed after 5 s, not 20.
        self.exits.callback(stack.stop, timeout=TEARDOWN_STOP_SECONDS)
        platform = Platform(
            name=name,
            stack=stack,
            redis=redis_server,
            database_url=database_url,
            proxy=proxy,
            vhost=vhost,
            worker_metrics_url=f"http://127.0.0.1:{worker_metrics_port}/metrics",
            scheduler_metrics_url=f"http://127.0.0.1:{scheduler_metrics_port}/metrics",
        )

        platform.token = token
        platform.session.headers["Authorization"] = f"Token {platform.token}"
        self.exits.callback(platform.session.close)
        # Started side by side: each waits mostly for its own imports and readiness.
        port = free_port()
        with ThreadPoolExecutor(max_workers=3) as pool:
            started = {
                "web": pool.submit(stack.start_web, port, workers=2, threads=4, timeout=90)
                if web
                else None,
                "worker": pool.submit(
                    stack.start_worker, concurrency=worker_concurrency, timeout=120
                )
                if worker
                else None,
                "scheduler": pool.submit(stack.start_scheduler) if scheduler else None,
            }
            # Every start is waited for before any error is raised: each process
            # that did start is in stack.processes, for stack.stop.
            wait([f for f in started.values() if f is not None])
        if started["web"] is not None:
            platform.web = started["web"].result()
            platform.base_url = f"http://127.0.0.1:{port}"
        if started["worker"] is not None:
            platform.worker = started["worker"].result()
        if started["scheduler"] is not None:
            platform.scheduler = started["scheduler"].result()
        return platform

    def close(self) -> None:
        self.exits.close()
