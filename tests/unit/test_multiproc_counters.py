"""observability.multiproc.counter_totals: one counter family summed over processes' files."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, values

from observability.multiproc import counter_totals


def test_counter_totals_reads_one_family_as_prometheus_client_writes_it(
    tmp_path: Path, monkeypatch: object
) -> None:
    # given counters written in multiprocess mode by this process (and a
    # second family with the same label), as a worker's children write them
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))  # type: ignore[attr-defined]
    previous = values.ValueClass
    values.ValueClass = values.MultiProcessValue()
    try:
        registry = CollectorRegistry()
        recycled = Counter("demo_recycled", "x", ("hostname", "reason"), registry=registry)
        other = Counter("demo_other", "x", ("reason",), registry=registry)
        recycled.labels("h", "max_tasks").inc(3)
        recycled.labels("h", "aborted").inc()
        recycled.labels("g", "max_tasks").inc(2)
        other.labels("max_tasks").inc(100)
    finally:
        values.ValueClass = previous

    # then only that family is counted, summed by the label asked for
    assert counter_totals(tmp_path, "demo_recycled", "reason") == {"max_tasks": 5, "aborted": 1}
    assert counter_totals(tmp_path, "missing", "reason") == {}
