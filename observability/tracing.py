"""OpenTelemetry tracing: set up after fork, one span per attempt, all in the submitting request's trace.

The TracerProvider and its BatchSpanProcessor own a background thread;
created before a prefork fork, the children inherit a dead thread and their
spans vanish (opentelemetry-python-contrib issue 166). So setup runs after
fork: `worker_process_init` in Celery children, gunicorn's `post_fork` in
web workers, at start in the scheduler. Spans are flushed before a child
exits or is recycled (`worker_process_shutdown`; contrib issue 4916). The
worker's main process, which forks children for its whole life, exports
nothing itself: its spans are spooled to files its children export
(`setup_spooled`, observability.span_spool, docs/forking.md).

Exporters: OTLP over HTTP when OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set
(the SDK reads the other standard OTEL_* variables itself); a JSON-lines
file when JOBS_OTEL_SPAN_FILE is set (tests, local debugging); off
otherwise, or when OTEL_SDK_DISABLED is true.

A job stores the W3C traceparent of the request that submitted it
(`Job.trace_parent`); publishing and every attempt run in that context, so
all attempts of a job, however many times the scheduler republished it,
are in one trace.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from observability import http_spans, span_spool

logger = logging.getLogger(__name__)

_propagator = TraceContextTextMapPropagator()
_provider: Any = None
_lock = threading.Lock()
# The span spool this process replays (a worker child's), or None.
_replay: dict[str, Path | None] = {"from": None}
TRACER_NAME = "jobs"


class JsonLinesSpanExporter:
    """SpanExporter appending one JSON object per span to `path` (O_APPEND; safe across processes)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult  # noqa: PLC0415 - import cost: the SDK only when an exporter is configured

        lines = []
        for span in spans:
            ctx = span.get_span_context()
            parent = span.parent
            lines.append(
                json.dumps(
                    {
                        "name": span.name,
                        "trace_id": format(ctx.trace_id, "032x"),
                        "span_id": format(ctx.span_id, "016x"),
                        "parent_span_id": format(parent.span_id, "016x") if parent else None,
                        "kind": span.kind.name,
                        "start_time_unix_nano": span.start_time,
                        "end_time_unix_nano": span.end_time,
                        "attributes": dict(span.attributes or {}),
                        "events": [
                            {"name": event.name, "attributes": dict(event.attributes or {})}
                            for event in span.events
                        ],
                        "status": span.status.status_code.name,
                        "resource": dict(span.resource.attributes),
                        "pid": os.getpid(),
                    },
                    default=str,
                )
            )
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            for line in lines:
                os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def enabled() -> bool:
    """Whether this process exports spans (an exporter is configured and the SDK not disabled)."""
    if settings.OTEL_SDK_DISABLED:
        return False
    return bool(
        settings.JOBS_OTEL_SPAN_FILE
        or settings.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
        or settings.OTEL_EXPORTER_OTLP_ENDPOINT
    )


def _exporter() -> Any:
    if not enabled():
        return None
    if settings.JOBS_OTEL_SPAN_FILE:
        return JsonLinesSpanExporter(settings.JOBS_OTEL_SPAN_FILE)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: PLC0415 - import cost: the OTLP exporter only when configured

    return OTLPSpanExporter()


def _install(provider: Any) -> None:
    global _provider
    provider._jobs_pid = os.getpid()
    # The global provider can be set once per process; after fork the
    # child's copy still points at the parent's, so replace it directly.
    trace._TRACER_PROVIDER_SET_ONCE._done = False
    trace.set_tracer_provider(provider)
    _provider = provider


def _resource(role: str) -> Any:
    from opentelemetry.sdk.resources import Resource  # noqa: PLC0415 - import cost

    return Resource.create(
        {
            "service.name": settings.OTEL_SERVICE_NAME,
            "service.instance.role": role,
            # Which process sent it (semantic conventions, process.pid): a
            # worker child also sends its main process's spans (span_spool).
            "process.pid": os.getpid(),
        }
    )


def setup(*, role: str, replay_from: Path | None = None) -> bool:
    """Install a TracerProvider in this process (call after fork). Returns False when tracing is off.

    `role` (web, worker, scheduler) becomes the `service.instance.role`
    resource attribute. Instruments Celery (publish and run spans) and, for
    the web, Django. `replay_from` (a worker child's) is the span spool of
    its worker's main process (observability.span_spool): replayed at
    once and every second from a thread, and at shutdown().
    """
    exporter = _exporter()
    if exporter is None:
        return False
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415 - import cost
    from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415 - import cost

    with _lock:
        if _provider is not None and getattr(_provider, "_jobs_pid", None) == os.getpid():
            return True
        provider = TracerProvider(resource=_resource(role))
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=500))
        _install(provider)
        _replay["from"] = replay_from
    _instrument(role)
    if replay_from is not None:
        # From a thread: a flush to a slow receiver must not hold up the
        # child's start (billiard ends a child that is not up within 4 s).
        span_spool.replayer.start(replay_from, tracer_name=TRACER_NAME, flush=flush)
    return True


def setup_spooled(*, role: str, directory: Path | None) -> bool:
    """Install a TracerProvider that spools its spans for the children to export (no thread).

    For a process that forks children for its whole life (the worker's
    main process, docs/forking.md): each span is written to `directory` in
    the thread that ends it (observability.span_spool). Nothing is
    instrumented. Returns False when tracing is off or there is no directory.
    """
    if not enabled() or directory is None:
        return False
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415 - import cost
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: PLC0415 - import cost

    with _lock:
        if _provider is not None and getattr(_provider, "_jobs_pid", None) == os.getpid():
            return True
        provider = TracerProvider(resource=_resource(role))
        provider.add_span_processor(SimpleSpanProcessor(span_spool.SpoolExporter(directory)))
        _install(provider)
    return True


_instrumented_pid: dict[str, int] = {}


def _instrument(role: str) -> None:
    from opentelemetry.instrumentation.celery import CeleryInstrumentor  # noqa: PLC0415 - import cost: instrumentation only when tracing is on

    celery = CeleryInstrumentor()
    # A process forked after its parent instrumented Celery inherits that
    # instrumentation, bound to the parent's provider: its spans would go to
    # a copy nobody flushes at the child's exit. Instrument again, bound to
    # this process's provider.
    if celery.is_instrumented_by_opentelemetry and _instrumented_pid.get("celery") != os.getpid():
        celery.uninstrument()
    if not celery.is_instrumented_by_opentelemetry:
        celery.instrument()
        _instrumented_pid["celery"] = os.getpid()
    if role == "web":
        from opentelemetry.instrumentation.django import DjangoInstrumentor  # noqa: PLC0415 - import cost: instrumentation only when tracing is on

        if not DjangoInstrumentor().is_instrumented_by_opentelemetry:
            DjangoInstrumentor().instrument(
                excluded_urls=http_spans.UNTRACED_URLS, response_hook=http_spans.name_span_by_route
            )


def shutdown() -> None:
    """Replay what is spooled, flush and stop this process's provider (before a child exits)."""
    global _provider
    if _replay["from"] is not None and _provider is not None:
        span_spool.replayer.stop()
        span_spool.replay_spooled(_replay["from"], tracer_name=TRACER_NAME, flush=flush)
    with _lock:
        provider, _provider = _provider, None
    if provider is not None and getattr(provider, "_jobs_pid", None) == os.getpid():
        provider.force_flush()
        provider.shutdown()


def flush() -> None:
    """Export pending spans now."""
    if _provider is not None:
        _provider.force_flush()


def current_traceparent() -> str:
    """The W3C traceparent of the active span, or "" when there is none."""
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier.get("traceparent", "")


@contextmanager
def in_trace(traceparent: str) -> Iterator[None]:
    """Run the block with `traceparent` as the current context (no-op when empty)."""
    if not traceparent:
        yield
        return
    token = otel_context.attach(_propagator.extract({"traceparent": traceparent}))
    try:
        yield
    finally:
        otel_context.detach(token)


@contextmanager
def attempt_span(
    *, traceparent: str, job_id: object, kind: str, attempt: int, queue: str
) -> Iterator[Any]:
    """A span around one attempt, a child of the current span or else of `traceparent`.

    Attributes follow our `job.*` namespace: job.id, job.kind, job.attempt,
    job.queue; the caller adds job.outcome and job.retry_delay_seconds.
    """
    tracer = trace.get_tracer(TRACER_NAME)
    parent = (
        None
        if trace.get_current_span().get_span_context().is_valid
        else _propagator.extract({"traceparent": traceparent})
    )
    with tracer.start_as_current_span(
        f"job.attempt {kind}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes={
            "job.id": str(job_id),
            "job.kind": kind,
            "job.attempt": attempt,
            "job.queue": queue,
        },
    ) as span:
        yield span


def decision_attributes(decision: Any) -> dict[str, Any]:
    """Span attributes of a retry decision (jobs.decisions.Decision; None gives {}).

    job.decision (retry, requeue, dead), job.dead_reason when dead,
    job.retry_delay_seconds when another attempt follows,
    job.retry_budget ("deferred", "fallback") when the retry budget changed
    or could not judge the decision.
    """
    if decision is None:
        return {}
    attributes: dict[str, Any] = {"job.decision": str(decision.action)}
    if decision.dead_reason:
        attributes["job.dead_reason"] = str(decision.dead_reason)
    if decision.retries:
        attributes["job.retry_delay_seconds"] = decision.delay_seconds
    if getattr(decision, "budget_deferred", False):
        attributes["job.retry_budget"] = "deferred"
    elif getattr(decision, "budget_fallback", False):
        attributes["job.retry_budget"] = "fallback"
    return attributes


def attempt_span_ended_outside(
    *,
    traceparent: str,
    job_id: object,
    kind: str,
    attempt: int,
    queue: str,
    outcome: str,
    started_at: datetime,
    finished_at: datetime,
    attributes: dict[str, Any] | None = None,
) -> None:
    """Export the span of an attempt that was ended from outside its child.

    A hard time limit or a lost child ends the attempt before its own span
    (attempt_span) can end, so whoever records the end (the worker's main
    process, the scheduler's lease sweep, a redelivery) exports it here: the
    same name and attributes, the attempt's own start and end times (UTC
    datetimes), status ERROR with the outcome, in the job's trace. A no-op
    when tracing is off.
    """
    tracer = trace.get_tracer(TRACER_NAME)
    span = tracer.start_span(
        f"job.attempt {kind}",
        context=_propagator.extract({"traceparent": traceparent}) if traceparent else None,
        kind=trace.SpanKind.CONSUMER,
        start_time=int(started_at.timestamp() * 1e9),
        attributes={
            "job.id": str(job_id),
            "job.kind": kind,
            "job.attempt": attempt,
            "job.queue": queue,
            "job.outcome": outcome,
            **(attributes or {}),
        },
    )
    span.set_status(trace.Status(trace.StatusCode.ERROR, outcome))
    span.end(end_time=int(finished_at.timestamp() * 1e9))


def trace_id_from(traceparent: str) -> str:
    """The trace id (32 hex digits) inside a W3C traceparent, or "" when there is none."""
    parts = traceparent.split("-")
    return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else ""


def trace_id_of(span: Any) -> str:
    """Hex trace id of `span`, or "" when it is not recording."""
    ctx = span.get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else ""
