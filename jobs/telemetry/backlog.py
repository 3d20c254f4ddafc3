"""The autoscaling signal: jobs_backlog{queue, state}, counted in the database (docs/scaling.md).

`waiting`: jobs that could start now (status queued, published or not,
prefetched by a worker or not, in any priority sub-queue; and retrying or
delayed jobs already due that the scheduler has not promoted yet).
`running`: attempts in flight (status running). Jobs held back for later
(a retry's backoff, the retry budget, `run_after`) are not counted: more
workers would not start them sooner. Broker-independent by construction:
the same numbers on Redis and on RabbitMQ, whatever the broker prefetched.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from enum import StrEnum

from django.conf import settings
from django.db import close_old_connections, connection
from django.db.models import Count, Q
from django.db.models.functions import Now
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from jobs.models import Job, JobStatus
from observability.metrics import scrape_family

logger = logging.getLogger(__name__)


class BacklogState(StrEnum):
    """The `state` label of jobs_backlog."""

    WAITING = "waiting"
    RUNNING = "running"


# Due: the database's clock (DESIGN.md, Faults), never this host's.
_DUE = Q(status__in=(JobStatus.RETRYING, JobStatus.DELAYED), next_attempt_at__lte=Now())
_WAITING = Q(status=JobStatus.QUEUED) | _DUE
_RUNNING = Q(status=JobStatus.RUNNING)


def backlog_counts(*, queues: Iterable[str] | None = None) -> dict[str, dict[BacklogState, int]]:
    """{queue: {state: jobs}} for `queues` (default: JOBS_QUEUES), every pair present (0 if none).

    One statement, one round trip; each branch of its OR is a range of
    jobs_job_status_next_idx, so the rows read are the backlog's, never the
    table's (measured in docs/scaling.md). Raises the database's errors.
    """
    wanted = list(queues if queues is not None else settings.JOBS_QUEUES)
    counts = {q: dict.fromkeys(BacklogState, 0) for q in wanted}
    rows = (
        Job.objects.filter(_WAITING | _RUNNING, queue__in=wanted)
        .order_by()
        .values_list("queue")
        .annotate(waiting=Count("pk", filter=_WAITING), running=Count("pk", filter=_RUNNING))
    )
    for queue, waiting, running in rows:
        counts[queue] = {BacklogState.WAITING: waiting, BacklogState.RUNNING: running}
    return counts


class BacklogCollector(Collector):
    """jobs_backlog{queue, state} at scrape time; nothing when the database cannot be read.

    Served by the web and the scheduler (dashboards and scalers take max over
    processes, as for jobs_queue_depth). `close_connection=True` closes the
    database connection after each scrape (the scheduler's scrape threads).
    """

    def __init__(self, *, close_connection: bool = False) -> None:
        self.close_connection = close_connection

    def collect(self) -> Iterator[GaugeMetricFamily]:
        close_old_connections()
        family = scrape_family("jobs_backlog")
        try:
            for queue, states in backlog_counts().items():
                for state, count in states.items():
                    family.add_metric([queue, state.value], count)
        except Exception as exc:  # a scrape reports what it can; jobs_database_up says why
            logger.warning("backlog collection failed: %s: %s", type(exc).__name__, exc)
        finally:
            if self.close_connection:
                connection.close()
        yield family
