"""The machinery of the three /metrics endpoints: worker (its main process), scheduler, web.

What each serves of the jobs domain, and starting them: jobs.telemetry.exporters.

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
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import REGISTRY, CollectorRegistry, make_wsgi_app

from observability.collectors import WorkerPoolCollector
from observability.multiproc import (
    CompactingMultiProcessCollector,
    activate,
    multiproc_dir,
    role_dir,
)
from observability.series import failed_series

logger = logging.getLogger(__name__)

METRICS_THREAD_NAME = "jobs-worker-metrics"
SCRAPE_SOCKET_TIMEOUT = 5.0


def prepare_worker_dir(*, nodename: str) -> None:
    """Switch the worker's main process to multiprocess metrics, in an emptied per-node directory.

    Runs in celeryd_init, before the pool forks, so every child inherits it.
    """
    directory = activate(role_dir(f"worker-{nodename}"), wipe_first=True)
    logger.info("worker metrics directory %s", directory)


class Gate(Protocol):
    """What the exporter needs of a fork gate (jobs.fork_gate.ForkGate)."""

    def section(self, name: str) -> AbstractContextManager[None]: ...

    def start_thread(self, target: Callable[[], object], *, name: str) -> threading.Thread: ...


def register_process_series(registry: CollectorRegistry) -> None:
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
    register_process_series(registry)
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
    """prometheus-client's exporter, one request at a time, each a section of `gate`.

    The worker's main process forks pool children for its whole life; a
    scrape (reading metric files, the process table, imports on the first
    one) must not be under way in another thread when it does.
    """

    gate: Gate

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.gate.section("worker metrics"):
            super().process_request(request, client_address)


def serve_gated(
    *, port: int, addr: str, registry: CollectorRegistry, gate: Gate
) -> GatedWSGIServer:
    """Serve `registry` at http://addr:port/metrics from one thread registered with `gate`.

    Returns the server; raises OSError when the port cannot be bound.
    """
    server = make_server(
        addr,
        port,
        make_wsgi_app(registry),
        server_class=GatedWSGIServer,
        handler_class=_QuietHandler,
    )
    server.gate = gate
    gate.start_thread(server.serve_forever, name=METRICS_THREAD_NAME)
    return server
