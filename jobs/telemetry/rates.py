"""jobs_rate_waiting{kind} and jobs_rate_limit_per_second{kind} on the web's /metrics."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from jobs import rate_gate
from jobs.telemetry.concurrency import add_waiting
from observability.metrics import scrape_family

logger = logging.getLogger(__name__)


class RateCollector(Collector):
    """Per kind with a rate limit (jobs.rate_gate.rates): the jobs waiting for it, held or
    released and not started (one grouped read of the partial index jobs_job_rate_idx per
    scrape), and its rate in starts per second. Nothing is exported for the waiting jobs
    when the database cannot be read."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        waiting = scrape_family("jobs_rate_waiting")
        limit = scrape_family("jobs_rate_limit_per_second")
        try:
            rates = rate_gate.rates()
            for kind, found in sorted(rates.items()):
                limit.add_metric([kind], found.per_second)
            add_waiting(waiting, rate_gate.waiting_q(), list(rates))
        except Exception as exc:  # a scrape reports what it can
            logger.warning("rate collection failed: %s: %s", type(exc).__name__, exc)
        yield from (waiting, limit)
