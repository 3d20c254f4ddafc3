"""report.csv_summary: URL sources over a local http.server, and bounded memory on a large file."""

from __future__ import annotations

import gc
import os
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from devstack.services import free_port
from jobs.kinds import PermanentError, RetryableError
from jobs.kinds.csv_summary import MAX_REDIRECTS, CsvSummary
from tests.unit.ssrf_hosts import PUBLIC_ADDRESS, SsrfHosts

SMALL_CSV = "name,age\nalice,30\nbob,\ncarol,40\ndave,50\n"


def _by_name(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {column["name"]: column for column in result["columns"]}


# --- URL source -------------------------------------------------------------


@dataclass
class CsvHttp:
    """A running CSV server: its base URL and the paths it was asked for, in order."""

    url: str
    paths: list[str] = field(default_factory=list)


@pytest.fixture
def csv_http(tmp_path: Path) -> Iterator[CsvHttp]:
    """An http.server on loopback serving files of tmp_path.

    /data.csv serves tmp_path/data.csv, /status/N answers N, /redirect?to=X
    answers 302 to X, /loop redirects to itself.
    """
    root = tmp_path
    served = CsvHttp(url="")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _redirect(self, location: str) -> None:
            self.send_response(302)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            served.paths.append(self.path)
            if self.path.startswith("/redirect?to="):
                self._redirect(self.path.split("=", 1)[1])
                return
            if self.path == "/loop":
                self._redirect("/loop")
                return
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
    served.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def csv_http_server(csv_http: CsvHttp) -> str:
    """The base URL of `csv_http`."""
    return csv_http.url


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

    kind = CsvSummary()
    payload = kind.validate_payload({"source": f"http://127.0.0.1:{free_port()}/x.csv"})

    with pytest.raises(RetryableError):
        kind.run(payload, attempt_context())


# --- redirects and private destinations -------------------------------------


def test_csv_summary_url_redirect_followed(
    csv_http: CsvHttp, tmp_path: Path, attempt_context: Callable[..., Any]
) -> None:
    (tmp_path / "data.csv").write_text(SMALL_CSV)
    kind = CsvSummary()
    payload = kind.validate_payload({"source": f"{csv_http.url}/redirect?to=/data.csv"})

    result = kind.run(payload, attempt_context())

    assert result["rows"] == 4
    assert csv_http.paths == ["/redirect?to=/data.csv", "/data.csv"]


def test_csv_summary_url_too_many_redirects_is_permanent(
    csv_http: CsvHttp, attempt_context: Callable[..., Any]
) -> None:
    kind = CsvSummary()
    payload = kind.validate_payload({"source": f"{csv_http.url}/loop"})

    with pytest.raises(PermanentError, match="redirects"):
        kind.run(payload, attempt_context())
    assert len(csv_http.paths) == MAX_REDIRECTS + 1


def test_csv_summary_url_redirect_to_other_scheme_is_permanent(
    csv_http: CsvHttp, attempt_context: Callable[..., Any]
) -> None:
    kind = CsvSummary()
    payload = kind.validate_payload({"source": f"{csv_http.url}/redirect?to=file:///etc/passwd"})

    with pytest.raises(PermanentError, match="not http"):
        kind.run(payload, attempt_context())


def test_csv_summary_url_private_destination_is_permanent_when_restricted(
    csv_http: CsvHttp, attempt_context: Callable[..., Any], settings: Any
) -> None:
    # given a job accepted while private destinations were allowed
    kind = CsvSummary()
    payload = kind.validate_payload({"source": f"{csv_http.url}/data.csv"})

    # when the setting is off at run time
    settings.JOBS_ALLOW_PRIVATE_DESTINATIONS = False

    # then the attempt fails permanently without a request
    with pytest.raises(PermanentError, match="non-public"):
        kind.run(payload, attempt_context())
    assert csv_http.paths == []


def test_csv_summary_url_redirect_to_private_destination_is_refused(
    ssrf_hosts: SsrfHosts,
    rebinding_dns: Callable[..., Any],
    attempt_context: Callable[..., Any],
) -> None:
    # given a public source that redirects to a loopback name
    # (real servers in a namespace: tests/unit/ssrf_hosts.py)
    rebinding_dns({"csv.example.test": [[PUBLIC_ADDRESS]]})
    port = ssrf_hosts.port
    path = f"/redirect?to=http://localhost:{port}/data.csv"
    kind = CsvSummary()
    payload = kind.validate_payload({"source": f"http://csv.example.test:{port}{path}"})

    # then the redirect target is refused before it is requested
    with pytest.raises(PermanentError, match="loopback name"):
        ssrf_hosts.run(kind.run, payload, attempt_context())
    assert [h["path"] for h in ssrf_hosts.public.hits] == [path]
    assert ssrf_hosts.internal_hits() == []


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
