"""Each worker's own memory report, kept in Redis for the admin overview.

Why a report the worker writes, not a broadcast the web sends: `celery
inspect stats` waits out its whole timeout for replies (it cannot know how
many workers exist), so the overview would take that long on every view, or
show a cached answer of unknown age; and a broadcast to a busy worker may not
be answered at all. Instead every worker's main process writes a small JSON
report (children's RSS and threads, the memory limit, children recycled by
reason) every JOBS_WORKER_REPORT_INTERVAL seconds, with a time-to-live of
three intervals, so a dead worker's report disappears by itself. Reading all
of them is two Redis round trips (ZRANGEBYSCORE, then MGET), bounded by
MAX_WORKERS, whatever the workers are doing.

Keys (on the broker's Redis): `jobs:worker-report:<node name>` (JSON, with
TTL) and the sorted set `jobs:worker-reports` (node name scored by the Unix
time of its last report, pruned by the writers).

A report:

    {"hostname": "worker-1@box", "at": 1767000000.5,
     "children": [{"pid": 4242, "rss_bytes": 61000000, "threads": 3}, ...],
     "main_rss_bytes": 58000000, "max_memory_per_child_bytes": 536870912,
     "recycled": {"max_tasks": 3, "worker_lost": 1}}

`recycled` are the totals of jobs_worker_children_recycled_total for this
worker's host, read from its own multiprocess metric files (the same numbers
its /metrics serves).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from django.conf import settings

from jobs import fork_gate
from jobs.broker import broker_client
from observability.multiproc import compact, counter_totals, file_pids, locked, multiproc_dir
from observability.worker_info import memory_block

logger = logging.getLogger(__name__)

KEY_PREFIX = "jobs:worker-report:"
INDEX_KEY = "jobs:worker-reports"
MAX_WORKERS = 100
RECYCLED_FAMILY = "jobs_worker_children_recycled"


def recycled_by_reason() -> dict[str, int]:
    """{reason: children recycled} summed over this worker's metric files; {} when none are kept."""
    directory = multiproc_dir()
    if directory is None:
        return {}
    return counter_totals(directory, RECYCLED_FAMILY, "reason")


def build_report(worker: Any, *, memory: dict[str, Any] | None = None) -> dict[str, Any]:
    """This worker's report (module docstring); read in its main process.

    `memory` is its memory_block(), read now when not given.
    """
    memory = memory or memory_block(worker, with_pending_retries=False)
    return {
        "hostname": worker.hostname,
        "at": time.time(),
        "children": memory["children"],
        "main_rss_bytes": memory["main_rss_bytes"],
        "max_memory_per_child_bytes": memory["max_memory_per_child_bytes"],
        "recycled": recycled_by_reason(),
    }


def write_report(client: Any, report: dict[str, Any], *, ttl: float) -> None:
    """Store `report` under its hostname for `ttl` seconds; prune expired index entries."""
    now = report["at"]
    pipe = client.pipeline(transaction=False)
    pipe.set(KEY_PREFIX + report["hostname"], json.dumps(report), px=int(ttl * 1000))
    pipe.zadd(INDEX_KEY, {report["hostname"]: now})
    pipe.zremrangebyscore(INDEX_KEY, "-inf", now - ttl)
    pipe.execute()


def read_reports(client: Any, *, max_age: float) -> list[dict[str, Any]]:
    """Live reports (newer than `max_age` seconds), newest first, at most MAX_WORKERS.

    Raises redis.RedisError when Redis cannot be read.
    """
    names = client.zrevrangebyscore(
        INDEX_KEY, "+inf", time.time() - max_age, start=0, num=MAX_WORKERS
    )
    if not names:
        return []
    reports = []
    for raw in client.mget([KEY_PREFIX + n.decode() for n in names]):
        if raw:
            try:
                reports.append(json.loads(raw))
            except ValueError:
                continue
    return reports


class ReportWriter(threading.Thread):
    """Daemon thread in the worker's main process: writes the report every `interval` seconds.

    Each tick is a jobs.fork_gate section (the main process forks children).

    A failed write (Redis down) is logged once per outage and retried on the
    next tick; it never affects the worker.
    """

    def __init__(self, worker: Any, *, interval: float) -> None:
        super().__init__(name="jobs-worker-report", daemon=True)
        self.worker = worker
        self.interval = interval
        self.stopped = threading.Event()
        self._failing = False

    def tick(self) -> None:
        # This process forks pool children: a fork waits for the section under
        # way, so the tick is a few short ones (read, fold, count, write).
        try:
            with fork_gate.section("worker report: memory"):
                memory = memory_block(self.worker, with_pending_retries=False)
            self._fold_dead_children()
            with fork_gate.section("worker report: recycles"):
                report = build_report(self.worker, memory=memory)
            with fork_gate.section("worker report: write"):
                write_report(broker_client(), report, ttl=3 * self.interval)
            self._failing = False
        except Exception as exc:  # a report is best-effort; the worker must not care
            with fork_gate.section("worker report: log"):
                if not self._failing:
                    logger.warning("worker report not written: %s: %s", type(exc).__name__, exc)
                self._failing = True

    def _fold_dead_children(self) -> None:
        # One child at a time, each a section: a fold is the longest step
        # (scrapes fold them too).
        directory = multiproc_dir()
        if directory is None:
            return
        with fork_gate.section("worker report: list"):
            pids = sorted(file_pids(directory))
        for pid in pids:
            with fork_gate.section("worker report: fold"), locked(directory):
                compact(directory, only={pid})

    def run(self) -> None:
        while not self.stopped.is_set():
            self.tick()
            self.stopped.wait(self.interval)

    def stop(self) -> None:
        self.stopped.set()


def start_writer(worker: Any) -> ReportWriter | None:
    """Start the report thread unless JOBS_WORKER_REPORT_INTERVAL is 0."""
    interval = settings.JOBS_WORKER_REPORT_INTERVAL
    if interval <= 0:
        return None
    writer = fork_gate.register(ReportWriter(worker, interval=interval))
    writer.start()
    return writer
