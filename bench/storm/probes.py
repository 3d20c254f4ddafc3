"""What the drill reads once a second: a worker's memory and threads, and each side's job counts."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

import psutil
import redis

COUNTER_PREFIX = (
    "storm:stock:"  # bench.stock_tasks.COUNTER_PREFIX (not imported: it loads Celery tasks)
)


@dataclass(frozen=True)
class Counts:
    """One side's jobs at one instant.

    `in_flight`: attempts running now; `pending_retries`: failed attempts
    whose retry has not started (platform: rows `retrying`; stock: countdown
    messages, which the worker holds); `waiting`: jobs not started yet;
    `attempts`: attempts started so far.
    """

    succeeded: int = 0
    failed: int = 0
    in_flight: int = 0
    pending_retries: int = 0
    waiting: int = 0
    attempts: int = 0

    @property
    def settled(self) -> int:
        return self.succeeded + self.failed

    @property
    def pending(self) -> int:
        """Jobs the side still knows of and has not settled."""
        return self.in_flight + self.pending_retries + self.waiting


@dataclass(frozen=True)
class Sample:
    """One reading: `t` seconds since the storm was sent; worker tree RSS (bytes) and threads."""

    t: float
    rss_bytes: int
    threads: int
    counts: Counts


def worker_tree(pid: int) -> tuple[int, int]:
    """(RSS bytes, threads) of a worker's main process plus all its children.

    A child that exits while being read counts as 0. Raises psutil.NoSuchProcess
    when the main process is gone.
    """
    root = psutil.Process(pid)
    rss = threads = 0
    for process in [root, *root.children(recursive=True)]:
        try:
            with process.oneshot():
                rss += process.memory_info().rss
                threads += process.num_threads()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return rss, threads


class PlatformProbe:
    """Counts the platform's jobs from its database (the source of truth), minus the warm-up's.

    `database_url` is a postgres:// URL or a sqlite:/// path. Raises the
    driver's error when the database cannot be read.
    """

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self._conn: Any = None
        self.offset = Counts()

    def _query(self, sql: str) -> list[tuple[Any, ...]]:
        if self._conn is None:
            if self.database_url.startswith("sqlite:///"):
                self._conn = sqlite3.connect(self.database_url[len("sqlite:///") :], timeout=10)
            else:
                import psycopg  # noqa: PLC0415 - only for a PostgreSQL database URL

                dsn = self.database_url.replace("postgres://", "postgresql://", 1)
                self._conn = psycopg.connect(dsn, autocommit=True)
        return list(self._conn.execute(sql).fetchall())

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        """The rows of `sql` on the platform's database (the outage scenario's reads)."""
        return self._query(sql)

    def raw(self) -> Counts:
        statuses = dict(self._query("SELECT status, COUNT(*) FROM jobs_job GROUP BY status"))
        ((running, attempts),) = self._query(
            "SELECT COUNT(*) FILTER (WHERE finished_at IS NULL), COUNT(*) FROM jobs_attempt"
        )
        return Counts(
            succeeded=statuses.get("succeeded", 0),
            failed=statuses.get("dead", 0) + statuses.get("cancelled", 0),
            in_flight=running,
            pending_retries=statuses.get("retrying", 0),
            # A `running` row whose attempt ended is between its outcome and the next state.
            waiting=statuses.get("queued", 0) + max(0, statuses.get("running", 0) - running),
            attempts=attempts,
        )

    def read(self) -> Counts:
        raw = self.raw()
        return Counts(
            succeeded=raw.succeeded - self.offset.succeeded,
            failed=raw.failed - self.offset.failed,
            in_flight=raw.in_flight,
            pending_retries=raw.pending_retries,
            waiting=raw.waiting,
            attempts=raw.attempts - self.offset.attempts,
        )

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class StockProbe:
    """Counts the stock worker's tasks from the counters its task keeps in Redis (bench.stock_tasks)."""

    def __init__(self, broker_url: str, *, queue: str = "celery") -> None:
        self.client = redis.Redis.from_url(broker_url, socket_timeout=5)
        self.queue = queue
        self.offset = Counts()

    def read(self) -> Counts:
        names = ("succeeded", "failed", "inflight", "pending", "attempts")
        values = self.client.mget([COUNTER_PREFIX + name for name in names])
        got = dict(zip(names, (int(v or 0) for v in values), strict=True))
        # Not started yet: messages in the broker's list, and those the worker
        # reserved (kombu keeps them in the `unacked` hash until they start),
        # less the countdown retries among them, counted as pending retries.
        reserved = int(self.client.hlen("unacked")) - got["pending"]
        return Counts(
            succeeded=got["succeeded"] - self.offset.succeeded,
            failed=got["failed"] - self.offset.failed,
            in_flight=got["inflight"],
            # Briefly negative when a retry starts before its count landed.
            pending_retries=max(0, got["pending"]),
            waiting=int(self.client.llen(self.queue)) + max(0, reserved),
            attempts=got["attempts"] - self.offset.attempts,
        )

    def close(self) -> None:
        self.client.close()
