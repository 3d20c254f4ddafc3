"""The three /metrics endpoints: worker (its main process), scheduler, and the web's view.

Only the worker's main process listens (default 127.0.0.1:9808), so
children never race for the port and nothing is lost when one is
recycled: children write to the multiprocess directory, the main process
merges, after folding the files of dead children (observability.multiproc).
The scheduler serves its own counters and the central worker view
(celery_worker_up, celery_worker_tasks_active from Celery's worker events,
observability.worker_monitor) on 127.0.0.1:9809 by default. The web serves
its gunicorn workers' counters and the queue depth.
"""

from __future__ import annotations

import logging
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from celery import current_app
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    generate_latest,
    make_wsgi_app,
    start_http_server,
)

from jobs import fork_gate
from observability.collectors import (
    QueueDepthCollector,
    RetryBudgetCollector,
    WorkerPoolCollector,
)
from observability.multiproc import (
    CompactingMultiProcessCollector,
    activate,
    multiproc_dir,
    role_dir,
)
from observability.probes import DependencyCollector
from observability.series import failed_series
from observability.worker_monitor import WorkerMonitor, WorkerUpCollector

logger = logging.getLogger(__name__)

_worker_server: object | None = None
METRICS_THREAD_NAME = "jobs-worker-metrics"
SCRAPE_SOCKET_TIMEOUT = 5.0


def prepare_worker_dir(*, nodename: str) -> None:
    """Switch the worker's main process to multiprocess metrics, in an emptied per-node directory.

    Runs in celeryd_init, before the pool forks, so every child inherits it.
    """
    directory = activate(role_dir(f"worker-{nodename}"), wipe_first=True)
    logger.info("worker metrics directory %s", directory)


def _register_process_series(registry: CollectorRegistry) -> None:
    """Add this role's own series to `registry`.

    With a multiprocess directory (observability.multiproc): every process's
    files merged, dead processes' folded. Without one (tests, a single
    process): the default registry's collectors as they are.
    """
    directory = multiproc_dir()
    if directory is not None:
        CompactingMultiProcessCollector(registry, directory)
    else:
        for collector in list(REGISTRY._collector_to_names):
            registry.register(collector)


def worker_registry(*, hostname: str, max_memory_kb: int) -> CollectorRegistry:
    """Registry of the worker's /metrics: children's files merged, plus pool state read at scrape."""
    registry = CollectorRegistry()
    first, last = failed_series.collectors()
    registry.register(first)
    _register_process_series(registry)
    registry.register(
        WorkerPoolCollector(hostname=hostname, max_memory_per_child_bytes=max_memory_kb * 1024)
    )
    registry.register(last)
    return registry


class _QuietHandler(WSGIRequestHandler):
    # A client that stalls mid-request holds the fork gate no longer than this (seconds).
    timeout = SCRAPE_SOCKET_TIMEOUT

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        return None


class GatedWSGIServer(WSGIServer):
    """prometheus-client's exporter, one request at a time, each a jobs.fork_gate section.

    The worker's main process forks pool children for its whole life; a
    scrape (reading metric files, the process table, imports on the first
    one) must not be under way in another thread when it does.
    """

    def process_request(self, request: Any, client_address: Any) -> None:
        with fork_gate.section("worker metrics"):
            super().process_request(request, client_address)


def serve_gated(*, port: int, addr: str, registry: CollectorRegistry) -> GatedWSGIServer:
    """Serve `registry` at http://addr:port/metrics from one registered thread; returns the server."""
    server = make_server(
        addr,
        port,
        make_wsgi_app(registry),
        server_class=GatedWSGIServer,
        handler_class=_QuietHandler,
    )
    fork_gate.start_thread(server.serve_forever, name=METRICS_THREAD_NAME)
    return server


def start_worker_exporter(*, hostname: str, max_memory_kb: int) -> None:
    """Serve the worker's /metrics from this (main) process, once. Port 0 turns it off."""
    global _worker_server
    port = settings.JOBS_WORKER_METRICS_PORT
    if not port or _worker_server is not None:
        return
    registry = worker_registry(hostname=hostname, max_memory_kb=max_memory_kb)
    try:
        _worker_server = serve_gated(
            port=port, addr=settings.JOBS_WORKER_METRICS_ADDR, registry=registry
        )
    except OSError as exc:
        logger.error("worker metrics not served: port %s: %s", port, exc)
        return
    logger.info("worker metrics on http://%s:%s/metrics", settings.JOBS_WORKER_METRICS_ADDR, port)


def scheduler_registry(monitor: WorkerMonitor) -> CollectorRegistry:
    """Registry of the scheduler's /metrics: its own counters, the workers' up/active view,
    the queue depth and oldest job's age (so the backlog alerts outlive the web), and its
    probes of the broker and the database."""
    registry = CollectorRegistry()
    _register_process_series(registry)
    registry.register(WorkerUpCollector(monitor))
    registry.register(QueueDepthCollector(backlog_only=True, close_connection=True))
    registry.register(DependencyCollector(monitor.app))
    return registry


def start_scheduler_exporter(monitor: WorkerMonitor) -> object | None:
    """Serve the scheduler's /metrics (JOBS_SCHEDULER_METRICS_ADDR:PORT); port 0 turns it off.

    Returns the server, or None when off or the port is taken (logged).
    """
    port = settings.JOBS_SCHEDULER_METRICS_PORT
    if not port:
        return None
    try:
        server = start_http_server(
            port, addr=settings.JOBS_SCHEDULER_METRICS_ADDR, registry=scheduler_registry(monitor)
        )
    except OSError as exc:
        logger.error("scheduler metrics not served: port %s: %s", port, exc)
        return None
    logger.info(
        "scheduler metrics on http://%s:%s/metrics", settings.JOBS_SCHEDULER_METRICS_ADDR, port
    )
    return server


def web_registry() -> CollectorRegistry:
    """Registry of the web's /metrics: gunicorn workers' files, queue depth, the retry budget,
    and its probes of the broker and the database."""
    registry = CollectorRegistry()
    _register_process_series(registry)
    registry.register(QueueDepthCollector())
    registry.register(RetryBudgetCollector())
    # The app config.celery_app built (importing it here would be a cycle: it imports
    # observability); `config` loads it in every process with Django settings.
    registry.register(DependencyCollector(current_app))
    return registry


def metrics_view(request: HttpRequest) -> HttpResponse:
    """GET /metrics for Prometheus (web process)."""
    return HttpResponse(generate_latest(web_registry()), content_type=CONTENT_TYPE_LATEST)
