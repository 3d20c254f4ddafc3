"""The thread in each worker's main process that writes its report (format: observability.worker_report)."""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.conf import settings

from jobs import clock, fork_gate, worker_reports
from jobs.telemetry.worker_memory import memory_block
from observability.multiproc import compact, file_pids, locked, multiproc_dir
from observability.worker_report import recycled_by_reason

logger = logging.getLogger(__name__)


def build_report(worker: Any, *, memory: dict[str, Any] | None = None) -> dict[str, Any]:
    """This worker's report (module docstring); read in its main process.

    `memory` is its memory_block(), read now when not given.
    """
    memory = memory or memory_block(worker, with_pending_retries=False)
    return {
        "hostname": worker.hostname,
        "at": clock.now().timestamp(),  # the database's clock (jobs.worker_reports)
        "children": memory["children"],
        "main_rss_bytes": memory["main_rss_bytes"],
        "max_memory_per_child_bytes": memory["max_memory_per_child_bytes"],
        "recycled": recycled_by_reason(),
        "queues": consumed_queues(worker),
    }


def consumed_queues(worker: Any) -> list[str]:
    """The queues this worker consumes (its -Q, else the app's task queues); [] when unknown."""
    try:
        return sorted(worker.app.amqp.queues.consume_from or worker.app.amqp.queues)
    except Exception:  # a report is best-effort
        return []


class ReportWriter(threading.Thread):
    """Daemon thread in the worker's main process: writes the report every `interval` seconds.

    Each tick is a jobs.fork_gate section (the main process forks children).

    A failed write (the state store down) is logged once per outage and retried on the
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
                worker_reports.write(report, ttl=3 * self.interval)
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
