"""jobs_concurrency_waiting{kind} and jobs_concurrency_limit{kind} on the web's /metrics."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from django.db.models import Count, Q
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from jobs import concurrency_gate
from jobs.models import Job
from observability.metrics import scrape_family

logger = logging.getLogger(__name__)


class ConcurrencyCollector(Collector):
    """Per kind with a concurrency limit (jobs.concurrency_gate.limits): the jobs waiting
    for a slot (one grouped read of the partial index jobs_job_concurrency_idx per scrape)
    and the limit. Nothing is exported for the waiting jobs when the database cannot be read.
    """

    def collect(self) -> Iterator[GaugeMetricFamily]:
        waiting = scrape_family("jobs_concurrency_waiting")
        limit = scrape_family("jobs_concurrency_limit")
        try:
            limits = concurrency_gate.limits()
            for kind, found in sorted(limits.items()):
                limit.add_metric([kind], float(found.limit))
            add_waiting(waiting, concurrency_gate.waiting_q(), list(limits))
        except Exception as exc:  # a scrape reports what it can
            logger.warning("concurrency collection failed: %s: %s", type(exc).__name__, exc)
        yield from (waiting, limit)


def add_waiting(family: GaugeMetricFamily, waiting_q: Q, kinds: list[str]) -> None:
    """Add to `family` one sample per kind of `kinds`: its jobs matching `waiting_q` (one
    grouped read of the partial index; none when `kinds` is empty). Raises the database's
    errors."""
    if not kinds:
        return
    counts = dict(
        Job.objects.filter(waiting_q, kind__in=kinds)
        .values_list("kind")
        .annotate(n=Count("id"))
        .values_list("kind", "n")
    )
    for kind in sorted(kinds):
        family.add_metric([kind], float(counts.get(kind, 0)))
