"""Telemetry of periodic schedules: tick counters and lag (the leader), overdue gauge (scrape).

jobs_schedule_ticks_total{schedule, outcome} and jobs_schedule_lag_seconds
{schedule} move in the scheduler that created the ticks;
jobs_schedule_overdue_seconds{schedule} is read from the schedule rows
when scraped, so every scheduler reports it, leading or not.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

from django.db import close_old_connections, connection
from django.db.models.functions import Now
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from jobs.periodic.models import Schedule
from jobs.periodic.ticks import TickReport
from jobs.reasons import TickOutcome
from observability import metrics as m

logger = logging.getLogger(__name__)


def initialize(names: Iterable[str]) -> None:
    """Create every outcome series of `names` at 0 (observability.series: why)."""
    for name in names:
        m.jobs_schedule_lag_seconds.labels(name)
        for outcome in TickOutcome:
            m.jobs_schedule_ticks_total.labels(name, outcome)


def record(report: TickReport) -> None:
    """Count one tick pass's ticks and observe its lags."""
    initialize({name for name, _, _ in report.ticks})
    for name, outcome, n in report.ticks:
        m.jobs_schedule_ticks_total.labels(name, outcome).inc(n)
    for name, lag in report.lags:
        m.jobs_schedule_lag_seconds.labels(name).observe(lag)


class ScheduleOverdueCollector(Collector):
    """jobs_schedule_overdue_seconds per enabled schedule, from its row (the database's clock).

    Nothing is reported when the database cannot be read (DatabaseDown names that).
    """

    def __init__(self, *, close_connection: bool = False) -> None:
        self.close_connection = close_connection

    def collect(self) -> Iterator[GaugeMetricFamily]:
        close_old_connections()
        family = m.scrape_family("jobs_schedule_overdue_seconds")
        try:
            rows = (
                Schedule.objects.filter(enabled=True)
                .annotate(now=Now())
                .values_list("name", "next_run_at", "now")
            )
            for name, next_run_at, now in rows:
                overdue = (now - next_run_at).total_seconds() if next_run_at else 0.0
                family.add_metric([name], max(0.0, overdue))
        except Exception as exc:  # the database unreachable: no verdict this scrape
            logger.warning("schedules not read for /metrics: %s", exc)
            return
        finally:
            if self.close_connection:
                connection.close()
        yield family
