"""Shared by the concurrency-limit tests: a sampler of live attempts read from the database
every 50 ms, and how long freed slots stayed idle."""

from __future__ import annotations

import statistics
import threading

import psycopg

from tests.integration.harness import Platform

SAMPLE_EVERY = 0.05


class Sampler:
    """Reads `sql` (one row per group: group, live count) every SAMPLE_EVERY s in a thread;
    `peak` is the highest count seen in any group, `samples` how many reads were made."""

    def __init__(self, platform: Platform, sql: str) -> None:
        self.dsn = platform.database_url.replace("postgres://", "postgresql://", 1)
        self.sql = sql
        self.peak = 0
        self.samples = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)

    def _run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                rows = conn.execute(self.sql).fetchall()
                self.peak = max([self.peak, *(int(row[1]) for row in rows)])
                self.samples += 1
                self.stop.wait(SAMPLE_EVERY)


def live_sql(kind: str, group: str) -> str:
    """Live attempts (unfinished attempt rows) of `kind` per `group` (an SQL expression)."""
    return (
        f"SELECT {group}, count(*) FROM jobs_attempt a JOIN jobs_job j ON j.id = a.job_id "
        f"WHERE j.kind = '{kind}' AND a.finished_at IS NULL GROUP BY 1"
    )


def slot_gaps(platform: Platform, kind: str, limit: int) -> str:
    """How long a freed slot of `kind` (per-kind `limit`) stayed idle: the k-th attempt end to
    the (k + limit)-th attempt start, median and mean in ms (the hand-off's latency)."""
    rows = platform.rows(
        "SELECT extract(epoch FROM a.started_at), extract(epoch FROM a.finished_at)"
        " FROM jobs_attempt a JOIN jobs_job j ON j.id = a.job_id WHERE j.kind = %s",
        (kind,),
    )
    starts = sorted(float(row[0]) for row in rows)
    ends = sorted(float(row[1]) for row in rows)
    gaps = [starts[i + limit] - ends[i] for i in range(len(ends) - limit)]
    if not gaps:
        return "n/a"
    return (
        f"median {statistics.median(gaps) * 1000:.0f} ms, mean {statistics.mean(gaps) * 1000:.0f}"
        f" ms, max {max(gaps) * 1000:.0f} ms"
    )
