"""Process memory and thread readings (psutil), and leak checks. All sizes are bytes."""

from __future__ import annotations

import logging
import os
import threading

import psutil

logger = logging.getLogger(__name__)


def rss_bytes(pid: int | None = None) -> int | None:
    """Resident set size of one process (default: this one), or None if it is gone."""
    try:
        return psutil.Process(pid or os.getpid()).memory_info().rss
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def tree_rss_bytes(pid: int) -> int:
    """RSS of a process plus all its descendants (a Celery worker: main + children).

    Processes that exit while being read count as 0. Raises psutil.NoSuchProcess
    when `pid` itself does not exist.
    """
    root = psutil.Process(pid)
    total = 0
    for process in [root, *root.children(recursive=True)]:
        try:
            total += process.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def live_threads() -> set[threading.Thread]:
    """Threads alive in this process now."""
    return set(threading.enumerate())


class LeakTracker:
    """Flags attempts that leave threads or memory behind, per kind, in one process.

    Threads: any thread started during an attempt and still alive after it
    is a leak at once (the Go incident's "goroutine leak detected" line).
    Memory: RSS growth above `rss_threshold_bytes` on `consecutive`
    attempts of one kind in a row. `check()` returns the resources leaked
    (subset of {"threads", "memory"}) and logs one warning line for each.
    """

    def __init__(
        self, *, rss_threshold_bytes: int, consecutive: int, ignore: frozenset[str] = frozenset()
    ) -> None:
        self.rss_threshold_bytes = rss_threshold_bytes
        self.consecutive = consecutive
        self.ignore = ignore
        self._growth_streak: dict[str, int] = {}

    def check(
        self,
        *,
        kind: str,
        job_id: object,
        threads_before: set[threading.Thread],
        rss_before: int | None,
        rss_after: int | None,
    ) -> list[str]:
        leaked: list[str] = []
        new_threads = [
            t
            for t in threading.enumerate()
            if t not in threads_before and t.is_alive() and t.name not in self.ignore
        ]
        if new_threads:
            leaked.append("threads")
            logger.warning(
                "leak suspected kind=%s resource=threads count=%s job_id=%s threads=%s",
                kind,
                len(new_threads),
                job_id,
                ",".join(sorted(t.name for t in new_threads))[:500],
            )
        if rss_before is not None and rss_after is not None:
            if rss_after - rss_before > self.rss_threshold_bytes:
                streak = self._growth_streak[kind] = self._growth_streak.get(kind, 0) + 1
                if streak >= self.consecutive:
                    leaked.append("memory")
                    logger.warning(
                        "leak suspected kind=%s resource=memory count=%s growth_bytes=%s rss_bytes=%s job_id=%s",
                        kind,
                        streak,
                        rss_after - rss_before,
                        rss_after,
                        job_id,
                    )
                    self._growth_streak[kind] = 0
            else:
                self._growth_streak[kind] = 0
        return leaked
