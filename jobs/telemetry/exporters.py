"""What the three /metrics endpoints serve, and starting them (machinery: observability.exporter).

The worker's main process serves its children's files merged and its pool
(observability.exporter.worker_registry); the scheduler its own counters,
the central worker view and the backlog series; the web its gunicorn
workers' counters, the queue depth and the retry budget.
"""

from __future__ import annotations

import logging

from celery import current_app
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    generate_latest,
    start_http_server,
)

from jobs import fork_gate
from jobs.leadership import Leadership
from jobs.telemetry.backlog import BacklogCollector
from jobs.telemetry.collectors import (
    LeaderCollector,
    PauseCollector,
    QueueDepthCollector,
    RetryBudgetCollector,
)
from jobs.telemetry.concurrency import ConcurrencyCollector
from jobs.telemetry.fuses import FuseCollector
from jobs.telemetry.rates import RateCollector
from jobs.telemetry.schedules import ScheduleOverdueCollector
from observability.exporter import register_process_series, serve_gated, worker_registry
from observability.probes import DependencyCollector
from observability.worker_monitor import WorkerMonitor, WorkerUpCollector

logger = logging.getLogger(__name__)


def start_worker_exporter(*, hostname: str, max_memory_kb: int) -> object | None:
    """Serve the worker's /metrics from this (main) process; call it once per process.

    Returns the server, or None when JOBS_WORKER_METRICS_PORT is 0 or the
    port is taken (logged).
    """
    port = settings.JOBS_WORKER_METRICS_PORT
    if not port:
        return None
    registry = worker_registry(hostname=hostname, max_memory_kb=max_memory_kb)
    try:
        server = serve_gated(
            port=port,
            addr=settings.JOBS_WORKER_METRICS_ADDR,
            registry=registry,
            gate=fork_gate.gate,
        )
    except OSError as exc:
        logger.error("worker metrics not served: port %s: %s", port, exc)
        return None
    logger.info("worker metrics on http://%s:%s/metrics", settings.JOBS_WORKER_METRICS_ADDR, port)
    return server


def scheduler_registry(
    monitor: WorkerMonitor, leadership: Leadership | None = None
) -> CollectorRegistry:
    """Registry of the scheduler's /metrics: its own counters, the workers' up/active view,
    the queue depth, oldest job's age and jobs_backlog (so the backlog alerts and the
    autoscaler outlive the web), how overdue each schedule is, its probes of the broker and the database, and whether
    it leads (with `leadership`)."""
    registry = CollectorRegistry()
    register_process_series(registry)
    if leadership is not None:
        registry.register(LeaderCollector(leadership))
    registry.register(WorkerUpCollector(monitor))
    registry.register(QueueDepthCollector(backlog_only=True, close_connection=True))
    registry.register(BacklogCollector(close_connection=True))
    registry.register(ScheduleOverdueCollector(close_connection=True))
    registry.register(DependencyCollector(monitor.app))
    return registry


def start_scheduler_exporter(
    monitor: WorkerMonitor, leadership: Leadership | None = None
) -> object | None:
    """Serve the scheduler's /metrics (JOBS_SCHEDULER_METRICS_ADDR:PORT); port 0 turns it off.

    Returns the server, or None when off or the port is taken (logged).
    """
    port = settings.JOBS_SCHEDULER_METRICS_PORT
    if not port:
        return None
    try:
        server = start_http_server(
            port,
            addr=settings.JOBS_SCHEDULER_METRICS_ADDR,
            registry=scheduler_registry(monitor, leadership),
        )
    except OSError as exc:
        logger.error("scheduler metrics not served: port %s: %s", port, exc)
        return None
    logger.info(
        "scheduler metrics on http://%s:%s/metrics", settings.JOBS_SCHEDULER_METRICS_ADDR, port
    )
    return server


def web_registry() -> CollectorRegistry:
    """Registry of the web's /metrics: gunicorn workers' files, queue depth, jobs_backlog, the
    retry budget, pauses, concurrency and rate limits, and its probes of the broker and the database."""
    registry = CollectorRegistry()
    register_process_series(registry)
    registry.register(QueueDepthCollector())
    registry.register(BacklogCollector())
    registry.register(RetryBudgetCollector())
    registry.register(PauseCollector())
    registry.register(ConcurrencyCollector())
    registry.register(FuseCollector())
    registry.register(RateCollector())
    # The app config.celery_app built (importing it here would be a cycle: it imports
    # observability); `config` loads it in every process with Django settings.
    registry.register(DependencyCollector(current_app))
    return registry


def metrics_view(request: HttpRequest) -> HttpResponse:
    """GET /metrics for Prometheus (web process)."""
    return HttpResponse(generate_latest(web_registry()), content_type=CONTENT_TYPE_LATEST)
