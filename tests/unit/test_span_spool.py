"""observability.span_spool: the worker main process's spans, spooled without a thread, replayed by a child."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from observability import span_spool, tracing

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def clean_provider() -> Iterator[None]:
    saved = trace._TRACER_PROVIDER
    try:
        yield
    finally:
        tracing._provider = None
        trace._TRACER_PROVIDER_SET_ONCE._done = False
        trace._TRACER_PROVIDER = saved


@pytest.mark.usefixtures("clean_provider")
def test_spans_of_the_main_process_are_spooled_without_a_thread_and_replayed_by_a_child(
    tmp_path: Path, settings: object
) -> None:
    # given the worker's main process with tracing on (any exporter configured)
    settings.OTEL_SDK_DISABLED = False  # type: ignore[attr-defined]
    settings.JOBS_OTEL_SPAN_FILE = str(tmp_path / "unused.jsonl")  # type: ignore[attr-defined]
    threads = {t.ident for t in threading.enumerate()}
    assert tracing.setup_spooled(role="worker", directory=tmp_path / "spans")

    # when it records an attempt ended from outside its child
    started = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    tracing.attempt_span_ended_outside(
        traceparent=TRACEPARENT,
        job_id="job-1",
        kind="demo.sleep",
        attempt=2,
        queue="default",
        outcome="hard_timeout",
        started_at=started,
        finished_at=started + timedelta(seconds=3),
    )

    # then no thread was started and the span waits in one file
    assert {t.ident for t in threading.enumerate()} == threads
    files = list((tmp_path / "spans").glob(f"*{span_spool.SUFFIX}"))
    assert len(files) == 1

    # when a child (its own provider) replays the spool
    exported = InMemorySpanExporter()
    child = TracerProvider()
    child.add_span_processor(SimpleSpanProcessor(exported))
    tracing._install(child)
    flushed: list[bool] = []
    replayed = span_spool.replay_spooled(
        tmp_path / "spans", tracer_name=tracing.TRACER_NAME, flush=lambda: flushed.append(True)
    )

    # then the span is exported as the main process made it, and the file is gone
    assert replayed == 1
    assert flushed == [True]
    [span] = exported.get_finished_spans()
    assert span.name == "job.attempt demo.sleep"
    assert format(span.context.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"
    assert span.parent is not None
    assert format(span.parent.span_id, "016x") == "b7ad6b7169203331"
    assert span.kind == trace.SpanKind.CONSUMER
    assert span.attributes is not None
    assert span.attributes["job.outcome"] == "hard_timeout"
    assert span.attributes["job.attempt"] == 2
    assert span.status.status_code == trace.StatusCode.ERROR
    assert span.end_time is not None
    assert span.start_time is not None
    assert span.end_time - span.start_time == 3_000_000_000
    assert list((tmp_path / "spans").iterdir()) == []


def test_a_span_claimed_by_a_child_that_died_is_taken_over(tmp_path: Path) -> None:
    # given a file a child claimed before it died (a pid that exists no more)
    record = {
        "name": "job.attempt demo.crash",
        "parent": None,
        "kind": "CONSUMER",
        "start_time": 1,
        "end_time": 2,
        "attributes": {"job.outcome": "worker_lost"},
        "events": [],
        "status": ["ERROR", "worker_lost"],
    }

    dead_pid = 2**22 + 12345
    assert not os.path.exists(f"/proc/{dead_pid}")
    (tmp_path / f"1-2-3{span_spool.SUFFIX}.{dead_pid}.claimed").write_text(json.dumps(record))
    (tmp_path / f"1-2-4{span_spool.SUFFIX}.{os.getpid()}.claimed").write_text(json.dumps(record))

    # when another child replays the spool
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    replayed = 0
    saved = trace._TRACER_PROVIDER
    try:
        trace._TRACER_PROVIDER_SET_ONCE._done = False
        trace.set_tracer_provider(provider)
        replayed = span_spool.replay_spooled(tmp_path, tracer_name="jobs")
    finally:
        trace._TRACER_PROVIDER_SET_ONCE._done = False
        trace._TRACER_PROVIDER = saved

    # then the dead child's claim is taken over; a live process's claim is left alone
    assert replayed == 1
    assert [s.name for s in exported.get_finished_spans()] == ["job.attempt demo.crash"]
    assert [p.name for p in tmp_path.iterdir()] == [
        f"1-2-4{span_spool.SUFFIX}.{os.getpid()}.claimed"
    ]
