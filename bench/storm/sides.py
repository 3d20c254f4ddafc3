"""The drill's two sides: the platform (worker + scheduler) and a stock Celery worker.

Each is started through devstack.processes.Stack (by pid, logs under
var/storm/logs/) and answers `submit`, `read` and `mark_baseline`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from celery import Celery

from config.env import env
from devstack.postgres import create_database, drop_database, ensure_postgres
from devstack.processes import ROOT, Process, Stack

from .model import STORM_DIR, StormConfig
from .probes import Counts, PlatformProbe, StockProbe


class Side(Protocol):
    """What run_side needs of a side."""

    name: str
    worker: Process

    def submit(self, count: int, payload: dict[str, Any]) -> None: ...

    def read(self) -> Counts: ...

    def mark_baseline(self) -> None: ...

    def close(self) -> None: ...


# Reads "[count, payload]" lines and submits that many demo.storm jobs each,
# answering "submitted <count>": one Django start for the whole drill.
SUBMITTER = """
import json, sys
from jobs.services import job_submit
for line in sys.stdin:
    count, payload = json.loads(line)
    for _ in range(count):
        job_submit(kind="demo.storm", payload=payload)
    print("submitted", count, flush=True)
"""


class PlatformSide:
    """The platform: its worker and scheduler; jobs submitted through jobs.services.job_submit.

    Submissions run in a process of the stack's environment: this command's
    own Django settings point at the configured Redis database, not the
    claimed one. It starts (Django's import time) while the worker does.
    """

    name = "platform"

    def __init__(self, stack: Stack, database_url: str, concurrency: int) -> None:
        self.stack = stack
        self.probe = PlatformProbe(database_url)
        stack.run(["python", "manage.py", "migrate", "--noinput"], timeout=300)
        self._log = open(stack.logdir / "platform-submitter.log", "ab")  # noqa: SIM115 - closed in close()
        self.submitter = subprocess.Popen(
            [sys.executable, "manage.py", "shell", "--no-startup", "-v", "0", "-c", SUBMITTER],
            cwd=ROOT,
            env={**stack.environ(), "LOG_LEVEL": "WARNING"},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            start_new_session=True,
        )
        self.worker = stack.start_worker(concurrency=concurrency, log_name="platform-worker")
        stack.start_scheduler()

    def submit(self, count: int, payload: dict[str, Any]) -> None:
        """Submit `count` jobs; raises RuntimeError (with the submitter's log) if it failed."""
        stdin, stdout = self.submitter.stdin, self.submitter.stdout
        answer = ""
        if stdin is not None and stdout is not None:
            try:
                stdin.write(json.dumps([count, payload]) + "\n")
                stdin.flush()
                # Skip what Django's shell prints itself ("N objects imported ...").
                while (answer := stdout.readline()) and not answer.startswith("submitted"):
                    pass
            except OSError:
                pass
        if answer.split() != ["submitted", str(count)]:
            log = (self.stack.logdir / "platform-submitter.log").read_text(errors="replace")
            raise RuntimeError(f"submitting jobs failed: {log[-1500:]}")

    def read(self) -> Counts:
        return self.probe.read()

    def mark_baseline(self) -> None:
        self.probe.offset = self.probe.raw()

    def close(self) -> None:
        if self.submitter.poll() is None:
            if self.submitter.stdin is not None:
                self.submitter.stdin.close()
            try:
                self.submitter.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.submitter.kill()
                self.submitter.wait()
        self._log.close()
        self.probe.close()


class StockSide:
    """Stock Celery (bench/storm_stock_app.py): countdown retries held by the worker."""

    name = "stock"

    def __init__(self, stack: Stack, broker_url: str, config: StormConfig) -> None:

        stack.commands["worker"] = [
            "celery",
            "-A",
            "bench.storm_stock_app",
            "-b",
            broker_url,
            "worker",
            "--loglevel",
            "INFO",
            f"--soft-time-limit={config.timeout:g}",
            f"--time-limit={config.timeout + 10:g}",
        ]
        self.worker = stack.start_worker(concurrency=config.concurrency, log_name="stock-worker")
        self.app = Celery("drill-stock", broker=broker_url, set_as_current=False)
        self.probe = StockProbe(broker_url)

    def submit(self, count: int, payload: dict[str, Any]) -> None:
        with self.app.producer_or_acquire() as producer:
            for _ in range(count):
                self.app.send_task("bench.stock_storm", kwargs=payload, producer=producer)

    def read(self) -> Counts:
        return self.probe.read()

    def mark_baseline(self) -> None:
        self.probe.offset = self.probe.read()

    def close(self) -> None:
        self.probe.close()


@contextmanager
def fresh_database(say: Callable[[str], None]) -> Iterator[str]:
    """A fresh PostgreSQL database, dropped afterwards, else a fresh SQLite file.

    The server is the configured one (DATABASE_URL) when it is PostgreSQL,
    else 127.0.0.1:5432 or the embedded one (devstack.postgres.ensure_postgres).
    SQLite is the last resort: under a storm of 1 s timeouts its single
    writer makes attempts wait for locks past their limits.
    """
    configured = env.str("DATABASE_URL", default="")
    try:
        if configured.startswith(("postgres://", "postgresql://")):
            admin_url = configured
        else:
            admin_url = ensure_postgres()
    except RuntimeError as exc:
        say(f"no PostgreSQL ({exc}); using SQLite, whose locks time attempts out under a storm")
        path = STORM_DIR / f"db-{os.getpid()}.sqlite3"
        try:
            yield f"sqlite:///{path}"
        finally:
            for leftover in STORM_DIR.glob(f"{path.name}*"):
                leftover.unlink()
        return
    name = f"jobs_storm_{os.getpid()}"
    url = create_database(name, admin_url=admin_url)
    try:
        yield url
    finally:
        drop_database(name, admin_url=admin_url)


def platform_env(
    config: StormConfig, database_url: str, redis_url: str, metrics_dir: Path
) -> dict[str, str]:
    """The platform processes' environment: the configured one, plus the drill's database, Redis and kind limits."""
    overrides = dict(env.json("JOBS_KIND_OVERRIDES", default={}))
    overrides["demo.storm"] = {
        **overrides.get("demo.storm", {}),
        "soft_time_limit": config.timeout,
        "hard_time_limit": config.timeout + 10,
        "max_attempts": config.fail_times + 3,
    }
    return {
        "DJANGO_SETTINGS_MODULE": env.str(
            "DJANGO_SETTINGS_MODULE", default="config.settings.local"
        ),
        # DEBUG keeps every query in memory: worker growth that is not the storm's.
        "DJANGO_DEBUG": "false",
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": redis_url,
        "JOBS_FAULT_KINDS": "true",
        "JOBS_KIND_OVERRIDES": json.dumps(overrides),
        "JOBS_QUEUE_MAX_READY": str(max(10_000, 2 * config.jobs)),
        "JOBS_METRICS_DIR": str(metrics_dir),
        "JOBS_WORKER_METRICS_PORT": "0",
        "JOBS_SCHEDULER_METRICS_PORT": "0",
        "OTEL_SDK_DISABLED": "true",
        "LOG_LEVEL": "INFO",
    }
