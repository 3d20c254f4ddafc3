"""Spans of the worker's main process, exported by its children (docs/forking.md).

The main process forks children for its whole life, so it runs no exporter
thread: its spans (attempts it ends from outside their child) go through a
SimpleSpanProcessor into `SpoolExporter`, one JSON file each, written in the
ending thread with no network. Each child claims files by an atomic rename
and replays them as spans of its own tracer (same name, parent, times,
attributes, status) from a thread, at start and every POLL_SECONDS, and at
exit; a file goes once exported, so a dead child's claim is taken over.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode

from observability.multiproc import multiproc_dir

logger = logging.getLogger(__name__)

POLL_SECONDS = 1.0
THREAD_NAME = "jobs-span-spool"
SUFFIX = ".span.json"
_sequence = itertools.count()


def spool_dir() -> Path | None:
    """This worker's span spool: `spans/` in its metrics directory (None outside a worker)."""
    directory = multiproc_dir()
    return None if directory is None else directory / "spans"


class SpoolExporter(SpanExporter):
    """Writes each span to `directory` as one JSON file (a temporary name, then an atomic rename)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            for span in spans:
                name = f"{time.time_ns()}-{os.getpid()}-{next(_sequence)}"
                partial = self.directory / f"{name}.partial"
                partial.write_text(json.dumps(span_record(span), default=str))
                os.replace(partial, self.directory / f"{name}{SUFFIX}")
        except OSError as exc:
            logger.warning("span not spooled for a child to export: %s", exc)
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def _context(ctx: SpanContext | None) -> dict[str, Any] | None:
    if ctx is None:
        return None
    return {
        "trace_id": format(ctx.trace_id, "032x"),
        "span_id": format(ctx.span_id, "016x"),
        "is_remote": ctx.is_remote,
        "trace_flags": int(ctx.trace_flags),
    }


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """What a child needs to make `span` again (JSON-ready)."""
    return {
        "name": span.name,
        "parent": _context(span.parent),
        "kind": span.kind.name,
        "start_time": span.start_time,
        "end_time": span.end_time,
        "attributes": dict(span.attributes or {}),
        "events": [
            {"name": e.name, "attributes": dict(e.attributes or {}), "timestamp": e.timestamp}
            for e in span.events
        ],
        "status": [span.status.status_code.name, span.status.description],
    }


def replay(record: dict[str, Any], *, tracer_name: str) -> None:
    """End a span like the recorded one with this process's tracer `tracer_name` (its exporter sends it)."""
    parent = record.get("parent")
    context = None
    if parent:
        context = trace.set_span_in_context(
            NonRecordingSpan(
                SpanContext(
                    trace_id=int(parent["trace_id"], 16),
                    span_id=int(parent["span_id"], 16),
                    is_remote=bool(parent["is_remote"]),
                    trace_flags=trace.TraceFlags(parent["trace_flags"]),
                )
            )
        )
    span = trace.get_tracer(tracer_name).start_span(
        record["name"],
        context=context,
        kind=SpanKind[record["kind"]],
        attributes=record.get("attributes") or {},
        start_time=record["start_time"],
    )
    for event in record.get("events") or []:
        span.add_event(event["name"], event.get("attributes") or {}, event.get("timestamp"))
    code, description = record.get("status") or ("UNSET", None)
    if code != "UNSET":
        span.set_status(Status(StatusCode[code], description))
    span.end(end_time=record["end_time"])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _claimable(directory: Path) -> list[str]:
    """Spooled spans, and those claimed by a child that died before it exported them."""
    names = []
    for entry in os.scandir(directory):
        if entry.name.endswith(SUFFIX):
            names.append(entry.name)
        elif entry.name.endswith(".claimed"):
            pid = entry.name.removesuffix(".claimed").rpartition(".")[2]
            if pid.isdigit() and not _pid_alive(int(pid)):
                names.append(entry.name)
    return sorted(names)


def replay_spooled(
    directory: Path | None,
    *,
    tracer_name: str,
    flush: Callable[[], object] | None = None,
    limit: int = 1000,
) -> int:
    """Claim and replay up to `limit` spooled spans with `tracer_name`; returns how many.

    `flush` (the provider's force_flush) runs before the claimed files are
    removed: a child that dies first leaves them claimed, and another child
    takes them over (a span may then be sent twice, never lost). Never raises.
    """
    if directory is None:
        return 0
    try:
        names = _claimable(directory)
    except FileNotFoundError:
        return 0
    claimed: list[Path] = []
    for name in names[:limit]:
        base = name.split(SUFFIX)[0] + SUFFIX
        path = directory / f"{base}.{os.getpid()}.claimed"
        try:
            os.rename(directory / name, path)  # atomic: one child per file
        except FileNotFoundError:
            continue  # another child took it
        claimed.append(path)
        try:
            replay(json.loads(path.read_text()), tracer_name=tracer_name)
        except Exception:  # a bad file must not stop the others, nor the child
            logger.exception("spooled span %s not replayed", name)
    if claimed and flush is not None:
        try:
            flush()
        except Exception:
            logger.exception("replayed spans not flushed")
    for path in claimed:
        path.unlink(missing_ok=True)
    return len(claimed)


class Replayer:
    """The child's thread that replays spooled spans at once, then every POLL_SECONDS (one per process)."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._stop = threading.Event()

    def start(
        self, directory: Path | None, *, tracer_name: str, flush: Callable[[], object]
    ) -> None:
        if directory is None or (self._pid == os.getpid() and self._thread is not None):
            return
        self._pid, self._stop = os.getpid(), threading.Event()
        stop = self._stop

        def loop() -> None:
            while True:
                replay_spooled(directory, tracer_name=tracer_name, flush=flush)
                if stop.wait(POLL_SECONDS):
                    return

        self._thread = threading.Thread(target=loop, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()


replayer = Replayer()
