"""report.csv_summary: URL sources over a local http.server, and bounded memory on a large file."""

from __future__ import annotations

import gc
import os
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from jobs.kinds import PermanentError, RetryableError
from jobs.kinds.csv_summary import CsvSummary

SMALL_CSV = "name,age\nalice,30\nbob,\ncarol,40\ndave,50\n"


def _by_name(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {column["name"]: column for column in result["columns"]}


# --- URL source -------------------------------------------------------------


@pytest.fixture
def csv_http_server(tmp_path: Path) -> Iterator[str]:
    """An http.server on loopback: /data.csv serves tmp_path/data.csv, /status/N answers N."""
    root = tmp_path

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            if self.path.startswith("/status/"):
                self.send_response(int(self.path.rsplit("/", 1)[1]))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = (root / self.path.lstrip("/")).read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "text/csv")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_csv_summary_url_source_streams_and_summarises(
    csv_http_server: str, tmp_path: Path, attempt_context: Callable[..., Any]
) -> None:
    (tmp_path / "data.csv").write_text(SMALL_CSV)
    kind = CsvSummary()
    payload = kind.validate_payload({"source": f"{csv_http_server}/data.csv"})

    result = kind.run(payload, attempt_context())

    assert result["rows"] == 4
    assert _by_name(result)["age"]["mean"] == 40.0


@pytest.mark.parametrize(
    ("status", "error"), [(404, PermanentError), (429, RetryableError), (503, RetryableError)]
)
def test_csv_summary_url_http_errors_classified(
    csv_http_server: str, attempt_context: Callable[..., Any], status: int, error: type
) -> None:
    kind = CsvSummary()
    payload = kind.validate_payload({"source": f"{csv_http_server}/status/{status}"})

    with pytest.raises(error, match=f"HTTP {status}"):
        kind.run(payload, attempt_context())


def test_csv_summary_url_connection_refused_is_retryable(
    attempt_context: Callable[..., Any],
) -> None:
    from devstack.services import free_port

    kind = CsvSummary()
    payload = kind.validate_payload({"source": f"http://127.0.0.1:{free_port()}/x.csv"})

    with pytest.raises(RetryableError):
        kind.run(payload, attempt_context())


# --- bounded memory ---------------------------------------------------------

LARGE_CSV_BYTES = 20 * 1024 * 1024
# Half the file: an implementation that kept every distinct `text` value (or
# the rows) would need more than the file's size; a bounded one needs ~1 MB.
MEMORY_BOUND_BYTES = 10 * 1024 * 1024
TEXT_PAD = "lorem ipsum " * 33  # ~400 characters per text cell


def _write_high_cardinality_csv(path: Path, target_bytes: int) -> int:
    """Write a CSV of about `target_bytes` whose id and text columns are all unique.

    Long unique text cells keep the row count (and the test's run time) low
    while the distinct values alone would far exceed the memory bound.
    Returns the number of data rows.
    """
    rows = 0
    written = 0
    with path.open("w", encoding="utf-8", newline="") as handle:
        handle.write("id,value,category,text\n")
        while written < target_bytes:
            chunk = "".join(
                f"{i},{(i % 9973) / 8},cat{i % 7},{i * 2654435761 % 2**64:016x} {TEXT_PAD}\n"
                for i in range(rows, rows + 1000)
            )
            handle.write(chunk)
            written += len(chunk)
            rows += 1000
    return rows


def test_csv_summary_memory_bounded_on_large_high_cardinality_file(
    csv_root: Path, attempt_context: Callable[..., Any]
) -> None:
    # given a ~20 MB CSV whose distinct values alone would take far more than the bound
    path = csv_root / "large.csv"
    rows = _write_high_cardinality_csv(path, LARGE_CSV_BYTES)
    assert os.path.getsize(path) >= LARGE_CSV_BYTES
    kind = CsvSummary()
    payload = kind.validate_payload({"source": str(path), "distinct_cap": 1000})

    # when it is summarised under tracemalloc
    gc.collect()
    tracemalloc.start()
    try:
        baseline, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        started = time.monotonic()
        result = kind.run(payload, attempt_context(soft_in=120, hard_in=150))
        elapsed = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    # then the peak grew by well under the bound, and the stats are exact
    assert peak - baseline < MEMORY_BOUND_BYTES, f"peak grew {peak - baseline} bytes"
    assert elapsed < 30, f"took {elapsed:.1f}s"
    assert result["rows"] == rows
    columns = _by_name(result)
    assert columns["id"]["min"] == 0
    assert columns["id"]["max"] == rows - 1
    assert columns["id"]["mean"] == pytest.approx((rows - 1) / 2)
    for name in ("id", "text"):
        assert (columns[name]["distinct_count"], columns[name]["distinct_capped"]) == (1000, True)
    assert (columns["category"]["distinct_count"], columns["category"]["distinct_capped"]) == (
        7,
        False,
    )
