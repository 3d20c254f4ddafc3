"""Collectors computed at scrape time from shared state (Redis, the database, the process table)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import psutil
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from observability.metrics import scrape_family

logger = logging.getLogger(__name__)


class QueueDepthCollector(Collector):
    """Queue depth by part, per queue, and the dead-letter set.

    jobs_queue_depth{queue, state}: ready (broker lists, every priority
    sub-queue), reserved (delivered to a worker, not yet acknowledged),
    scheduled (retries waiting in our store), unpublished (the outbox).
    celery_queue_length{queue_name} is the ready part, as celery-exporter
    reports it. jobs_queue_oldest_age_seconds{queue} is the age of the
    oldest queued job. jobs_dead_letters{kind, reason} counts dead jobs now.
    """

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from django.db import close_old_connections

        from jobs import selectors

        close_old_connections()
        depth = scrape_family("jobs_queue_depth")
        length = scrape_family("celery_queue_length")
        oldest = scrape_family("jobs_queue_oldest_age_seconds")
        dead = scrape_family("jobs_dead_letters")
        try:
            depths = selectors.queue_depths()
            for queue, d in depths.items():
                for state in ("ready", "reserved", "scheduled", "unpublished"):
                    depth.add_metric([queue, state], getattr(d, state))
                length.add_metric([queue], d.ready)
                oldest.add_metric([queue], d.oldest_age_seconds)
            for (kind, reason), count in selectors.dead_letter_counts().items():
                dead.add_metric([kind, reason], count)
        except Exception:
            logger.exception("queue depth collection failed")
        yield from (depth, length, oldest, dead)


class WorkerPoolCollector(Collector):
    """Worker-level series read by the main process at scrape time.

    Children are read through the process table, so a child killed by
    SIGKILL is simply gone at the next scrape: no stale series, no pid of a
    dead process.
    """

    def __init__(self, *, hostname: str, max_memory_per_child_bytes: int) -> None:
        self.hostname = hostname
        self.max_memory_per_child_bytes = max_memory_per_child_bytes

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from celery.worker import state

        up = scrape_family("celery_worker_up")
        up.add_metric([self.hostname], 1)
        active = scrape_family("celery_worker_tasks_active")
        active.add_metric([self.hostname], len(state.active_requests))
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
        yield from (up, active, limit, rss, threads, main_rss)
