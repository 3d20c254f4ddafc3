"""Every counter series exists at 0 before its first increment, so increase() and rate() see it.

Prometheus computes `increase()` and `rate()` from the samples it scraped: a
series that first appears at 3 (its first three failures happened between
two scrapes) counts as no increase at all, and an alert on "failures over
5 minutes" misses exactly the first burst of a storm. Prometheus's advice
is to initialise the series you know of; in each process role, right after
the role switched to multiprocess metrics:

- `jobs.telemetry.series.initialize(role)`: every label set whose values
  are known in advance: registered kinds x configured queues x the enums
  (outcomes, reasons, limits); the worker's own hostname series; the
  attempt task's celery-exporter counters per queue.
- `FirstSeenAtZero`: the one open label, the exception class of
  `celery_task_failed_total`. A new exception name is exposed at 0 by the
  next scrape and its first increment is applied right after that scrape
  (so it shows one scrape later); later increments are immediate.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client.registry import Collector

from observability import metrics as m

# Exceptions an attempt ends with whatever the kind: known up front.
KNOWN_EXCEPTIONS = (
    "",
    "RetryableError",
    "PermanentError",
    "AttemptAbort",
    "SoftTimeLimitExceeded",
    "TimeLimitExceeded",
    "WorkerLostError",
    "UnstorableOutcome",
    "MemoryLimitExceeded",
)


class FirstSeenAtZero:
    """Holds back the first increment of a new `celery_task_failed_total` series until scraped at 0.

    Thread-safe: `inc()` runs in the worker's main thread, the scrape hooks
    in the exporter's HTTP thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._exposed: set[tuple[str, ...]] = set()
        self._pending: dict[tuple[str, ...], int] = {}
        self._scraping: set[tuple[str, ...]] = set()

    def expose(self, labels: tuple[str, ...]) -> None:
        """Create series `labels` at 0 and treat it as already seen (a known label set)."""
        m.celery_task_failed_total.labels(*labels)
        with self._lock:
            self._exposed.add(labels)

    def inc(self, labels: tuple[str, ...]) -> None:
        """Count one failure under `labels` (name, hostname, queue_name, exception)."""
        child = m.celery_task_failed_total.labels(*labels)
        with self._lock:
            if labels in self._exposed:
                child.inc()
                return
            self._pending[labels] = self._pending.get(labels, 0) + 1

    def before_scrape(self) -> None:
        with self._lock:
            self._scraping = set(self._pending)

    def after_scrape(self) -> None:
        # The series read by this scrape were at 0: their increments may show now.
        with self._lock:
            for labels in self._scraping:
                m.celery_task_failed_total.labels(*labels).inc(self._pending.pop(labels, 0))
                self._exposed.add(labels)
            self._scraping = set()

    def collectors(self) -> tuple[Collector, Collector]:
        """(first, last): register `first` before and `last` after every other collector."""
        return _Hook(self.before_scrape), _Hook(self.after_scrape)


class _Hook(Collector):
    """A collector that exports nothing and runs `action` when the registry is collected."""

    def __init__(self, action: Any) -> None:
        self.action = action

    def collect(self) -> Iterator[Any]:
        self.action()
        return iter(())


failed_series = FirstSeenAtZero()
