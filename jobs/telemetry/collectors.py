"""Collectors of the jobs domain computed at scrape time from shared state (Redis, the database)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from django.conf import settings
from django.db import close_old_connections, connection
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from jobs import budget, clock, pauses, selectors
from jobs.kinds.registry import kind_names
from jobs.leadership import Leadership
from jobs.reasons import PauseScope
from observability.metrics import scrape_family

logger = logging.getLogger(__name__)


class QueueDepthCollector(Collector):
    """Queue depth by part, per queue, and the dead-letter set.

    jobs_queue_depth{queue, state}: ready (broker lists, every priority
    sub-queue), reserved (delivered to a worker, not yet acknowledged),
    scheduled (retries waiting in our store), unpublished (the outbox),
    delayed (jobs waiting for their `run_after`).
    celery_queue_length{queue_name} is the ready part, as celery-exporter
    reports it. jobs_queue_oldest_age_seconds{queue} is the age of the
    oldest queued job. jobs_dead_letters{kind, reason} counts dead jobs now.

    The broker's parts (ready, reserved, celery_queue_length) are left out
    when the broker cannot be read, rather than reported as 0; the database's
    parts are still reported. The scheduler serves the two series the backlog
    alerts read as well (`backlog_only=True`: jobs_queue_depth and
    jobs_queue_oldest_age_seconds; dashboards and alerts take max over
    processes), so those alerts keep working while the web is down; the
    series users sum (celery_queue_length by queue_name, the dead-letter set)
    stay the web's alone. `close_connection=True` closes the database
    connection after each scrape (the scheduler's scrapes run in short-lived
    threads, whose connection would otherwise outlive them).
    """

    BROKER_STATES = ("ready", "reserved")
    DATABASE_STATES = ("scheduled", "unpublished", "delayed")

    def __init__(self, *, backlog_only: bool = False, close_connection: bool = False) -> None:
        self.backlog_only = backlog_only
        self.close_connection = close_connection

    def collect(self) -> Iterator[GaugeMetricFamily]:
        close_old_connections()
        depth = scrape_family("jobs_queue_depth")
        length = scrape_family("celery_queue_length")
        oldest = scrape_family("jobs_queue_oldest_age_seconds")
        dead = scrape_family("jobs_dead_letters")
        try:
            depths = selectors.queue_depths()
            for queue, d in depths.items():
                states: tuple[str, ...] = self.DATABASE_STATES
                if d.broker_read:
                    states = self.BROKER_STATES + states
                    length.add_metric([queue], d.ready)
                for state in states:
                    depth.add_metric([queue, state], getattr(d, state))
                oldest.add_metric([queue], d.oldest_age_seconds)
            if not self.backlog_only:
                for (kind, reason), count in selectors.dead_letter_counts().items():
                    dead.add_metric([kind, reason], count)
        except Exception as exc:  # a scrape reports what it can; jobs_database_up says why
            logger.warning("queue depth collection failed: %s: %s", type(exc).__name__, exc)
        finally:
            if self.close_connection:
                connection.close()
        yield from (depth, oldest)
        if not self.backlog_only:
            yield from (length, dead)


class RetryBudgetCollector(Collector):
    """jobs_retry_budget_used{kind} and jobs_retry_budget_limit{kind}: the current budget window.

    Read from the state store (jobs.budget.window_counts) at scrape time,
    one statement or pipelined round trip for every registered kind, so every
    process reports the same shared counter. Nothing is exported when the
    store cannot be read (jobs_retry_budget_fallback_total tells the story).
    """

    def collect(self) -> Iterator[GaugeMetricFamily]:
        used = scrape_family("jobs_retry_budget_used")
        limit = scrape_family("jobs_retry_budget_limit")
        try:
            for kind, (count, allowed) in budget.window_counts(
                kind_names(), now=time.time()
            ).items():
                used.add_metric([kind], count)
                limit.add_metric([kind], allowed)
        except Exception:
            logger.warning("retry budget collection failed", exc_info=True)
        yield from (used, limit)


class LeaderCollector(Collector):
    """jobs_scheduler_leader: 1 while this scheduler holds the leadership lease, else 0.

    Read from the scheduler loop's Leadership (jobs.leadership) at scrape
    time, without a database query: it says what this process acts on. Each
    scheduler is its own scrape target, so Prometheus's `instance` label tells
    them apart; the alert SchedulerLeadership wants their sum to be 1.
    """

    def __init__(self, leadership: Leadership) -> None:
        self.leadership = leadership

    def collect(self) -> Iterator[GaugeMetricFamily]:
        leader = scrape_family("jobs_scheduler_leader")
        leader.add_metric([], 1.0 if self.leadership.leading else 0.0)
        yield leader


class PauseCollector(Collector):
    """jobs_paused{scope, name} and jobs_paused_seconds{scope, name}: every registered kind
    and configured queue (0 while not paused), and any other name a pause names.

    One read of the Pause table per scrape (jobs.pauses), ages by the
    database's clock (jobs.clock). The alert JobsPausedTooLong reads the age.
    Nothing is exported when the database cannot be read.
    """

    def collect(self) -> Iterator[GaugeMetricFamily]:
        paused = scrape_family("jobs_paused")
        since = scrape_family("jobs_paused_seconds")
        try:
            now = clock.now()
            ages = {
                (row.scope, row.name): max(0.0, (now - row.paused_at).total_seconds())
                for row in pauses.pauses_active()
            }
            names = {(PauseScope.KIND.value, kind) for kind in kind_names()}
            names |= {(PauseScope.QUEUE.value, queue) for queue in settings.JOBS_QUEUES}
            for key in sorted(names | set(ages)):
                paused.add_metric(list(key), 1.0 if key in ages else 0.0)
                since.add_metric(list(key), ages.get(key, 0.0))
        except Exception as exc:  # a scrape reports what it can
            logger.warning("pause collection failed: %s: %s", type(exc).__name__, exc)
        yield from (paused, since)
