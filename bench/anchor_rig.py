"""The anchor (bench/anchor: Django + stock Celery + django-celery-results) as `python -m bench` runs it.

One `Anchor` is one fresh PostgreSQL database (migrated), a Redis database
of its own on the run's redis-server and a token; its worker (prefork, the
concurrency and log level of the platform's) and its gunicorn (2 workers × 4
threads, as config/gunicorn.py) are started and stopped by pid. Tasks are
published by name to its default queue `celery`, as any client of the
project would.
"""

from __future__ import annotations

import time

import redis
import requests

from bench import stock_app
from bench.rig import TOKEN_SCRIPT, Options
from bench.stock_worker import wait_drained
from devstack.postgres import create_database, drop_database
from devstack.processes import Process, Stack
from devstack.services import free_port, wait_for

QUEUE = "celery"
# The value the platform ships (config/settings/celery.py, JOBS_WORKER_DB_REUSE_MAX).
REUSE_MAX = 1000


class Anchor:
    """The anchor project on its own database and Redis database; `close()` stops and drops it."""

    def __init__(self, opts: Options, name: str) -> None:
        self.opts = opts
        opts.rigs.append(self)
        self.name = f"bench_anchor_{name}_{time.time_ns() % 10**9}"
        self.logdir = opts.logroot / self.name
        self.database_url = create_database(self.name, admin_url=opts.admin_url)
        self.redis_url = opts.redis_url()
        self.redis = redis.Redis.from_url(self.redis_url)
        self.redis.flushdb()
        self.stack = Stack(
            env={
                "DJANGO_SETTINGS_MODULE": "bench.anchor.settings",
                "DATABASE_URL": self.database_url,
                "CELERY_BROKER_URL": self.redis_url,
            },
            logdir=self.logdir,
        )
        self.stack.run(["python", "-m", "django", "migrate", "--no-input"], timeout=300)
        out = self.stack.run(["python", "-m", "django", "shell", "-c", TOKEN_SCRIPT]).stdout
        self.token = next(line[6:] for line in out.splitlines() if line.startswith("TOKEN="))
        self.web_port = 0

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Token {self.token}"}

    def start_worker(self, *, reuse_max: int = 0, name: str = "anchor-worker") -> Process:
        """`celery -A bench.anchor worker` (prefork 2, INFO); CELERY_DB_REUSE_MAX when `reuse_max`."""
        argv = ["celery", "-A", "bench.anchor", "worker", "--loglevel", "INFO"]
        argv += ["--concurrency", "2", "--hostname", f"{name}-{time.time_ns()}@%h"]
        self.stack.commands[name] = argv
        env = {"ANCHOR_DB_REUSE_MAX": str(reuse_max)} if reuse_max else {}
        process = self.stack.start(name, env=env)
        offset = len(process.log())  # the log file is shared by every worker of this name

        def ready() -> bool:
            if not process.alive():
                raise RuntimeError(f"{name} exited early:\n{process.log()[-3000:]}")
            return " ready." in process.log()[offset:]

        wait_for(ready, timeout=120, what=f"{name} ready")
        return process

    def stop(self, process: Process) -> None:
        process.stop()
        self.stack.processes.remove(process)

    def publish(self, task: str, count: int) -> None:
        """`count` messages of `task` (by name) on the anchor's queue, with task-sent events."""
        stock_app.configure(self.redis_url, tracked=True)
        stock_app.publish(task, count, queue=QUEUE)

    def drain(self, task: str, count: int, *, reuse_max: int, attempts: int = 1) -> float:
        """Attempts/s: `count` messages of `task` published, then a worker from "ready" to drained."""
        self.publish(task, count)
        worker = self.start_worker(reuse_max=reuse_max)
        started = time.perf_counter()
        ended = wait_drained(self.redis, QUEUE, timeout=1800)
        self.stop(worker)
        return count * attempts / (ended - started)

    def start_web(self) -> Process:
        """gunicorn bench.anchor.wsgi, 2 workers × 4 threads; returns once /healthz answers."""
        self.web_port = free_port()
        argv = ["gunicorn", "bench.anchor.wsgi", "--bind", f"127.0.0.1:{self.web_port}"]
        argv += ["--workers", "2", "--threads", "4", "--timeout", "30"]
        self.stack.commands["anchor-web"] = argv
        process = self.stack.start("anchor-web")

        def healthy() -> bool:
            if not process.alive():
                raise RuntimeError(f"anchor web exited early:\n{process.log()[-3000:]}")
            try:
                return requests.get(f"http://127.0.0.1:{self.web_port}/healthz", timeout=1).ok
            except requests.RequestException:
                return False

        wait_for(healthy, timeout=120, what="anchor web /healthz")
        return process

    def close(self) -> None:
        """Stop every process by pid, drop the database (once)."""
        if self in self.opts.rigs:
            self.opts.rigs.remove(self)
        self.stack.stop()
        self.redis.close()
        drop_database(self.name, admin_url=self.opts.admin_url)
