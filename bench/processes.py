"""Process memory for `python -m bench`: RSS of a process and its children, medians over time."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import psutil

MIB = 1024 * 1024


def rss(pid: int) -> int:
    """RSS of one process in bytes (0 when gone)."""
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except psutil.NoSuchProcess:
        return 0


def children(pid: int) -> list[int]:
    """Pids of the direct children of `pid`."""
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=False)]
    except psutil.NoSuchProcess:
        return []


def tree_rss(pid: int) -> int:
    """RSS of `pid` and its direct children, bytes."""
    return rss(pid) + sum(rss(c) for c in children(pid))


def settle(read: Callable[[], float], *, seconds: float = 2.0, interval: float = 0.2) -> float:
    """Median of `read()` sampled over `seconds`."""
    samples = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        samples.append(read())
        time.sleep(interval)
    return statistics.median(samples)


def settle_rss(groups: dict[str, list[int]], *, seconds: float = 2.0) -> dict[str, list[float]]:
    """{label: [median RSS in MiB of each pid]}, every pid sampled together over `seconds`."""
    samples: dict[int, list[int]] = {pid: [] for pids in groups.values() for pid in pids}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for pid, values in samples.items():
            values.append(rss(pid))
        time.sleep(0.2)
    return {
        label: [statistics.median(samples[pid]) / MIB for pid in pids]
        for label, pids in groups.items()
    }
