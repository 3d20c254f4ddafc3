"""Process memory readings (psutil). All sizes are bytes."""

from __future__ import annotations

import os

import psutil


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
