"""Collectors computed at scrape time from the process table (the jobs domain's: jobs.telemetry.collectors)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import psutil
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from observability.metrics import scrape_family


class WorkerPoolCollector(Collector):
    """Worker-level series read by the main process at scrape time.

    Children are read through the process table, so a child killed by
    SIGKILL is simply gone at the next scrape: no stale series, no pid of a
    dead process. Whether the worker is up, and its active tasks, come from
    the central view (observability.worker_monitor): a dead worker cannot
    say it is down.
    """

    def __init__(self, *, hostname: str, max_memory_per_child_bytes: int) -> None:
        self.hostname = hostname
        self.max_memory_per_child_bytes = max_memory_per_child_bytes

    def collect(self) -> Iterator[GaugeMetricFamily]:
        limit = scrape_family("jobs_worker_max_memory_per_child_bytes")
        limit.add_metric([self.hostname], self.max_memory_per_child_bytes)
        rss = scrape_family("jobs_worker_child_rss_bytes")
        threads = scrape_family("jobs_worker_child_threads")
        main_rss = scrape_family("jobs_worker_main_rss_bytes")
        me = psutil.Process(os.getpid())
        main_rss.add_metric([self.hostname], me.memory_info().rss)
        for child in me.children(recursive=False):
            try:
                with child.oneshot():
                    if child.status() == psutil.STATUS_ZOMBIE:
                        continue
                    rss.add_metric([self.hostname, str(child.pid)], child.memory_info().rss)
                    threads.add_metric([self.hostname, str(child.pid)], child.num_threads())
            except psutil.NoSuchProcess:
                continue
        yield from (limit, rss, threads, main_rss)
