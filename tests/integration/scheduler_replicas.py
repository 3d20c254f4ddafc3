"""Helpers of tests/integration/test_scheduler_replicas.py: more schedulers, the lease row,
forced outbox rows, and a consumer that counts every message the broker hands out."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from collections import Counter
from dataclasses import dataclass, field

import psycopg
import redis
import requests
from kombu import Connection, Consumer, Queue
from kombu.message import Message
from prometheus_client.parser import text_string_to_metric_families

from devstack.processes import ROOT, Process
from devstack.services import free_port
from tests.integration.harness import Platform

# Rows the outbox sweep can publish at once: queued a minute ago (past
# JOBS_SWEEP_UNPUBLISHED_AFTER), never published, of a registered kind.
FORCED_ROWS_SQL = """
INSERT INTO jobs_job (
    id, kind, queue, payload, status, attempts_made, max_attempts, request_fingerprint,
    created_at, enqueued_at, deliveries, worker_losses, trace_parent, progress_message,
    last_error, dead_reason, waiting_reason, waiting_detail, publish_claimed_by
)
SELECT gen_random_uuid(), 'demo.flaky', 'default', '{"fail_times": 0}'::jsonb, 'queued', 0, 3, '',
    now(), now() - interval '1 minute', 0, 0, '', '', '', '', '', '', ''
FROM generate_series(1, %s)
RETURNING id
"""

# A sweeper that ignores the lease: a second leader for the whole run (as a
# leader paused past its lease and woken up mid-sweep would be for a moment).
ROGUE_SWEEPER = """
import time
from django.db import close_old_connections
from jobs import services
print("rogue sweeper started", flush=True)
while True:
    try:
        services.outbox_sweep(limit=50, claimer="rogue")
    except Exception as exc:
        print("rogue sweep failed:", exc, flush=True)
        close_old_connections()
    time.sleep(0.05)
"""


def dsn(platform: Platform) -> str:
    return platform.database_url.replace("postgres://", "postgresql://", 1)


def lease(platform: Platform) -> tuple[str, int, bool] | None:
    """(holder, term, still valid by the database's clock) of the scheduler lease, or None."""
    rows = platform.rows(
        "SELECT holder, term, expires_at > now() FROM jobs_schedulerlease WHERE name = 'scheduler'"
    )
    return rows[0] if rows else None


def holder_pid(holder: str) -> int | None:
    """The pid in a lease holder's identity (`host:pid:random`), None when nobody holds it."""
    parts = holder.split(":")
    return int(parts[1]) if len(parts) == 3 else None


def leader_pid(platform: Platform) -> int | None:
    """The pid of the scheduler holding a valid lease now, else None."""
    row = lease(platform)
    return holder_pid(row[0]) if row is not None and row[2] else None


def start_scheduler(platform: Platform, name: str) -> tuple[Process, str]:
    """Another scheduler of `platform` (log `name`, its own metrics port); (process, /metrics URL)."""
    port = free_port()
    process = platform.stack.start_scheduler(
        env={"JOBS_SCHEDULER_METRICS_PORT": str(port)}, log_name=name
    )
    return process, f"http://127.0.0.1:{port}/metrics"


def start_rogue_sweeper(platform: Platform) -> Process:
    """A process sweeping the outbox every 50 ms without the lease; stopped with the stack."""
    log_path = platform.stack.logdir / "rogue-sweeper.log"
    with open(log_path, "ab") as handle:
        popen = subprocess.Popen(
            [sys.executable, "manage.py", "shell", "-c", ROGUE_SWEEPER],
            cwd=ROOT,
            env=platform.stack.environ(),
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    process = Process(name="rogue-sweeper", popen=popen, log_path=log_path)
    platform.stack.processes.append(process)
    return process


def leader_gauge(metrics_url: str) -> float | None:
    """jobs_scheduler_leader as scraped from `metrics_url` (None when absent or unreachable)."""
    try:
        text = requests.get(metrics_url, timeout=5).text
    except requests.RequestException:
        return None
    for family in text_string_to_metric_families(text):
        if family.name == "jobs_scheduler_leader":
            return family.samples[0].value
    return None


def insert_forced_rows(platform: Platform, count: int) -> list[str]:
    """Insert `count` forced outbox rows; returns their ids."""
    with psycopg.connect(dsn(platform), autocommit=True) as conn:
        return [str(row[0]) for row in conn.execute(FORCED_ROWS_SQL, (count,)).fetchall()]


@dataclass
class CountingConsumer:
    """Takes every message off the `default` queue and counts it by job id (Redis: BRPOP of
    the list; RabbitMQ: a kombu consumer of the quorum queue, each message acknowledged).

    Stands in for the workers: each message taken is counted (so a
    duplicate counts, whatever a worker would have done with it) and its
    job marked succeeded, so the lost-message check has nothing to republish.
    """

    platform: Platform
    counts: Counter[str] = field(default_factory=Counter)
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)

    def start(self) -> CountingConsumer:
        self.thread = threading.Thread(target=self._run, name="counting-consumer", daemon=True)
        self.thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)

    def _run(self) -> None:
        with psycopg.connect(dsn(self.platform), autocommit=True) as conn:
            if self.platform.vhost is not None:
                self._run_amqp(conn)
                return
            client = redis.Redis.from_url(self.platform.redis.url)
            while not self.stop.is_set():
                item = client.brpop(["default"], timeout=1)
                if item is not None:
                    self._count(conn, json.loads(item[1]).get("headers") or {})

    def _run_amqp(self, conn: psycopg.Connection) -> None:
        """RabbitMQ: consume the platform's quorum queue as declared (no_declare), ack each."""

        def taken(_body: object, message: Message) -> None:
            self._count(conn, message.headers or {})
            message.ack()

        with Connection(self.platform.broker_url) as broker:
            queue = Queue("default", no_declare=True)
            with Consumer(broker, [queue], callbacks=[taken], accept=None, prefetch_count=50):
                while not self.stop.is_set():
                    try:
                        broker.drain_events(timeout=1)
                    except TimeoutError:
                        continue

    def _count(self, conn: psycopg.Connection, headers: dict) -> None:
        try:
            job_id = str(headers["id"]).split(":")[0]
            uuid.UUID(job_id)
        except (ValueError, KeyError) as exc:
            self.errors.append(f"unreadable message: {exc}")
            return
        self.counts[job_id] += 1
        conn.execute(
            "UPDATE jobs_job SET status = 'succeeded', finished_at = now() WHERE id = %s",
            (job_id,),
        )
