"""jobs_broker_up and jobs_database_up: can this process reach its dependencies, asked at scrape time.

A dependency cannot report its own outage, and a process that depends on
it keeps answering scrapes, so the web's and the scheduler's /metrics
(observability.exporter) each probe the broker and the database when
scraped: 1 when a connection could be opened (and, for the database,
`SELECT 1` answered) within JOBS_METRICS_PROBE_TIMEOUT seconds, 0 when not.
The alerts BrokerDown and DatabaseDown read them (platform/prometheus/
alerts.yml); the series stay present, at 0, through the outage.

Each probe opens a connection of its own, with the process's settings,
and closes it: the answer is about reaching the server now, not about a
pooled connection that happens to be alive, and a probe never leaves a
connection behind in the exporter's short-lived scrape threads.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db import connections
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from observability.metrics import scrape_family

logger = logging.getLogger(__name__)


# The last answer of each probe in this process: a change is logged, not every scrape.
_last_answer: dict[str, bool] = {}


def _settled(dependency: str, reachable: bool, error: BaseException | None = None) -> bool:
    if _last_answer.get(dependency, True) != reachable:
        if reachable:
            logger.info("%s probe: reachable again", dependency)
        else:
            logger.warning("%s probe failed: %s: %s", dependency, type(error).__name__, error)
    _last_answer[dependency] = reachable
    return reachable


def broker_reachable(app: Any, *, timeout: float) -> bool:
    """Whether a new connection to `app`'s broker (Celery's own settings) opens within `timeout` s.

    One try per broker URL (failover alternatives included), no sleep between
    tries. For Redis the transport's channel sends PING (and refuses a replica,
    jobs.broker_transport); for AMQP the handshake completes.
    """
    options = {
        **app.conf.broker_transport_options,
        "socket_connect_timeout": timeout,
        "socket_timeout": timeout,
    }
    connection = app.connection_for_write(connect_timeout=timeout, transport_options=options)
    try:
        connection.ensure_connection(
            max_retries=max(len(connection.alt), 1) - 1,
            interval_start=0,
            interval_step=0,
            interval_max=0,
            timeout=timeout,
        )
        return _settled("broker", True)
    except Exception as exc:  # kombu and the transports raise many types for one outage
        return _settled("broker", False, exc)
    finally:
        connection.release()


def database_reachable(*, timeout: float, alias: str = "default") -> bool:
    """Whether a new connection to database `alias` opens and answers SELECT 1 within `timeout` s.

    The connection is a fresh Django wrapper of `alias`'s settings (not this
    thread's connection), closed before returning. libpq rounds a connect
    timeout up to whole seconds, at least 2.
    """
    wrapper = connections.create_connection(alias)
    if wrapper.vendor == "postgresql":
        wrapper.settings_dict = {
            **wrapper.settings_dict,
            "OPTIONS": {
                **wrapper.settings_dict.get("OPTIONS", {}),
                "connect_timeout": max(2, math.ceil(timeout)),
            },
        }
    try:
        with wrapper.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        return _settled("database", True)
    except Exception as exc:  # every driver error means "not reachable now"
        return _settled("database", False, exc)
    finally:
        try:
            wrapper.close()
        except Exception:  # closing a connection that never opened
            logger.debug("database probe: close failed", exc_info=True)


class DependencyCollector(Collector):
    """jobs_broker_up and jobs_database_up of this process, probed at each collect.

    `app` is the Celery app whose broker is probed; `timeout` (seconds)
    defaults to JOBS_METRICS_PROBE_TIMEOUT.
    """

    def __init__(self, app: Any, *, timeout: float | None = None) -> None:
        self.app = app
        self.timeout = timeout

    def collect(self) -> Iterator[GaugeMetricFamily]:
        timeout = settings.JOBS_METRICS_PROBE_TIMEOUT if self.timeout is None else self.timeout
        broker = scrape_family("jobs_broker_up")
        broker.add_metric([], int(broker_reachable(self.app, timeout=timeout)))
        database = scrape_family("jobs_database_up")
        database.add_metric([], int(database_reachable(timeout=timeout)))
        yield from (broker, database)
