"""Process memory and thread readings (psutil), and leak checks. All sizes are bytes."""

from __future__ import annotations

import logging
import os
import threading
from enum import StrEnum

import psutil

logger = logging.getLogger(__name__)


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes(pid: int | None = None) -> int | None:
    """Resident set size of one process (default: this one), or None if it is gone.

    This process's own RSS is read from /proc/self/statm where there is one
    (Linux): the worker reads it around every attempt, and a psutil.Process
    costs several times more (same figure: statm's second field is
    resident pages, what psutil reports as rss).
    """
    if pid is None:
        try:
            with open("/proc/self/statm", "rb") as statm:
                return int(statm.read().split()[1]) * _PAGE_SIZE
        except OSError:
            pass
    try:
        return psutil.Process(pid or os.getpid()).memory_info().rss
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
# The process's resident size when it was forked (mark_fork), or None in a
# process that was not marked (the worker's main process, web, scheduler).
_fork_rss: dict[str, int | None] = {"bytes": None}


def current_rss_bytes() -> int:
    """This process's resident set size now, in bytes, from /proc/self/statm.

    ~9 us per call whatever the process's size (measured on Linux 6.18, one
    read of a 40-byte file), about the cost of psutil's memory_info(); the
    memory guard calls it every JOBS_MEMORY_SAMPLE_INTERVAL. Raises OSError
    where /proc is not mounted.
    """
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[1]) * _PAGE_SIZE


def mark_fork() -> None:
    """Remember this process's RSS as its 'at fork' baseline (call first thing in a new child)."""
    _fork_rss["bytes"] = current_rss_bytes()


def owned_bytes() -> int:
    """Memory this process owns, in bytes: its RSS grown since it was forked (mark_fork).

    Why growth since fork, not USS or PSS (docs/memory.md has the figures):

    - A forked child starts with its parent's whole RSS, all of it shared
      copy-on-write. Celery's ru_maxrss counts it (and keeps the peak), so a
      large main process makes every child "over the limit" at birth. Growth
      since fork counts only pages the child brought in itself: its own
      allocations, buffers, leaks. Freed memory given back to the system
      lowers it again (ru_maxrss never goes down).
    - USS (private pages, psutil.memory_full_info) would also count inherited
      pages the child wrote to (copy-on-write copies, e.g. refcount updates on
      inherited objects), but Linux computes it by walking every page of the
      process (/proc/<pid>/smaps_rollup): measured 0.18 ms at 13 MiB resident,
      3.4 ms at 313 MiB and 34 ms at 2 GiB, so sampling a large child every
      100 ms would cost it up to a third of a core and hold its mm lock
      while it allocates. PSS, from the same walk, also charges each child a
      share of the parent's memory, the very thing the limit must ignore.
    - statm costs ~9 us at any size (current_rss_bytes). What it misses,
      copy-on-write copies of inherited pages, is bounded by the parent's own
      size and is already resident on the host; what the guard exists for,
      memory an attempt allocates, it sees within one sample.

    In a process never marked (not a worker child) the baseline is 0, so the
    result is the whole RSS.
    """
    return current_rss_bytes() - (_fork_rss["bytes"] or 0)


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


class LeakResource(StrEnum):
    """What an attempt left behind (jobs_leak_suspected_total's `resource`)."""

    THREADS = "threads"
    MEMORY = "memory"


class LeakTracker:
    """Flags attempts that leave threads or memory behind, per kind, in one process.

    Threads: any thread started during an attempt and still alive after it
    is a leak at once (the Go incident's "goroutine leak detected" line).
    Memory: RSS growth above `rss_threshold_bytes` on `consecutive`
    attempts of one kind in a row. `check()` returns the resources leaked
    (LeakResource members) and logs one warning line for each.
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
    ) -> list[LeakResource]:
        leaked: list[LeakResource] = []
        new_threads = [
            t
            for t in threading.enumerate()
            if t not in threads_before and t.is_alive() and t.name not in self.ignore
        ]
        if new_threads:
            leaked.append(LeakResource.THREADS)
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
                    leaked.append(LeakResource.MEMORY)
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
