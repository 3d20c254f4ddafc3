"""`report.csv_summary`: stream a CSV and summarise each column.

Memory is bounded whatever the file size: rows are read one at a time and
each column keeps O(1) numbers plus at most `distinct_cap` distinct values.
Local paths must lie under settings.JOBS_CSV_ROOTS and name a regular file,
at submit and again when the attempt opens it (jobs.kinds.localfiles: no
symbolic link followed below the root, whatever the path became). URLs must
be http(s) and, unless settings.JOBS_ALLOW_PRIVATE_DESTINATIONS is true,
reach only public addresses, each redirect hop resolved once, checked and
connected to by that address (jobs.kinds.outbound).
"""

from __future__ import annotations

import csv
import io
import math
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import requests
from django.conf import settings
from django.core.validators import URLValidator
from rest_framework import serializers

from jobs.kinds import localfiles, netguard, outbound
from jobs.kinds.base import AttemptContext, Kind, PermanentError, RetryableError
from jobs.kinds.registry import register
from jobs.policy import Policy

NULL_TOKENS = frozenset({"", "null", "none", "na", "n/a", "nan"})
MAX_COLUMNS = 1000
CANCEL_CHECK_EVERY_ROWS = 2000
# Redirects followed for a URL source; each target is checked like the source.
MAX_REDIRECTS = 5
# Delimiters csv.reader cannot use with the default dialect: line breaks end
# records and '"' is the quote character. (NUL is refused by CharField.)
FORBIDDEN_DELIMITERS = {
    "\n": "a line break (LF) ends a record",
    "\r": "a line break (CR) ends a record",
    '"': "it is the quote character",
    "\x00": "NUL is not allowed",
}


def _is_url(source: str) -> bool:
    return source.startswith(("http://", "https://"))


def resolve_local_source(source: str) -> Path:
    """The real path of a local CSV, which must lie under a JOBS_CSV_ROOTS directory.

    Raises ValueError otherwise (so the API answers 400, not the worker).
    """
    path = Path(source).expanduser().resolve()
    for root in settings.JOBS_CSV_ROOTS:
        if path.is_relative_to(Path(root).resolve()):
            return path
    raise ValueError(f"path must lie under one of {settings.JOBS_CSV_ROOTS}")


def local_source_error(path: Path) -> str | None:
    """Why the (resolved) `path` cannot be summarised, or None.

    A path that does not exist (yet) is fine: the attempt fails permanently
    if it is still missing. One that exists must be a regular file, not a
    directory, FIFO, socket or device; one we cannot stat is refused.
    """
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return f"cannot access {str(path)!r}: {exc.strerror or exc}"
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        return f"{str(path)!r} is {kind}; source must be a regular file"
    return None


class CsvSummaryPayload(serializers.Serializer):
    source = serializers.CharField(max_length=4096, help_text="http(s) URL or local path")
    # Not trimmed: "\t" and " " are delimiters, not blanks.
    delimiter = serializers.CharField(
        min_length=1, max_length=1, default=",", trim_whitespace=False
    )
    has_header = serializers.BooleanField(default=True)
    distinct_cap = serializers.IntegerField(min_value=1, max_value=100_000, default=1000)

    def validate_source(self, value: str) -> str:
        """A checked URL, or the resolved path of a regular file (or not yet existing one).

        Raises ValidationError for a URL that is not http(s) or names a
        literal non-public address (unless private destinations are allowed),
        a path outside JOBS_CSV_ROOTS, or one that exists but is not a
        regular file.
        """
        if _is_url(value):
            URLValidator(schemes=["http", "https"])(value)
            reason = netguard.literal_destination_error(value)
            if reason:
                raise serializers.ValidationError(reason)
            return value
        try:
            path = resolve_local_source(value)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from exc
        reason = local_source_error(path)
        if reason:
            raise serializers.ValidationError(reason)
        return str(path)

    def validate_delimiter(self, value: str) -> str:
        """Any one character but a line break, '"' or NUL (FORBIDDEN_DELIMITERS)."""
        if value in FORBIDDEN_DELIMITERS:
            raise serializers.ValidationError(
                f"{value!r} cannot be the delimiter: {FORBIDDEN_DELIMITERS[value]}."
            )
        return value


class ColumnStats:
    """Running statistics of one column; O(distinct_cap) memory."""

    __slots__ = (
        "name",
        "count",
        "nulls",
        "numeric",
        "mean",
        "minimum",
        "maximum",
        "distinct",
        "cap",
        "capped",
    )

    def __init__(self, name: str, cap: int) -> None:
        self.name = name
        self.count = self.nulls = self.numeric = 0
        # A running mean, not a running total: a total of finite values can
        # overflow to inf, which is not JSON.
        self.mean = 0.0
        self.minimum = math.inf
        self.maximum = -math.inf
        self.distinct: set[str] = set()
        self.cap = cap
        self.capped = False

    def add(self, value: str) -> None:
        self.count += 1
        stripped = value.strip()
        if stripped.lower() in NULL_TOKENS:
            self.nulls += 1
            return
        if not self.capped:
            self.distinct.add(stripped)
            if len(self.distinct) > self.cap:
                self.capped = True
                self.distinct = set()  # free it: the exact count is no longer known
        try:
            number = float(stripped)
        except ValueError:
            return
        if math.isfinite(number):
            self.numeric += 1
            self.mean += (number - self.mean) / self.numeric
            self.minimum = min(self.minimum, number)
            self.maximum = max(self.maximum, number)

    def summary(self) -> dict[str, Any]:
        has_numbers = self.numeric > 0
        return {
            "name": self.name,
            "count": self.count,
            "null_count": self.nulls,
            "numeric_count": self.numeric,
            "min": self.minimum if has_numbers else None,
            "max": self.maximum if has_numbers else None,
            "mean": self.mean if has_numbers and math.isfinite(self.mean) else None,
            # With distinct_capped, distinct_count is a lower bound (the cap).
            "distinct_count": self.cap if self.capped else len(self.distinct),
            "distinct_capped": self.capped,
        }


@register
class CsvSummary(Kind):
    name = "report.csv_summary"
    payload_serializer = CsvSummaryPayload
    policy = Policy(max_attempts=3, soft_time_limit=120, hard_time_limit=150)

    def run(self, payload: dict[str, Any], ctx: AttemptContext) -> Any:
        """Summarise the source once. Returns {"rows", "columns"} (see `summarise`).

        Raises RetryableError for network errors, 429 and 5xx; PermanentError
        for other 4xx, a destination (or redirect target) with a non-public
        address while private destinations are not allowed, too many
        redirects, a missing, unreadable or non-regular file, and malformed CSV.
        """
        source = payload["source"]
        if _is_url(source):
            try:
                with _fetch(source) as response:
                    if response.status_code == 429 or response.status_code >= 500:
                        raise RetryableError(f"HTTP {response.status_code} fetching {source}")
                    if response.status_code >= 400:
                        raise PermanentError(f"HTTP {response.status_code} fetching {source}")
                    response.raw.decode_content = True
                    # urllib3 closes the raw stream at EOF by default; TextIOWrapper
                    # then fails its next read with "I/O operation on closed file".
                    response.raw.auto_close = False
                    text = io.TextIOWrapper(
                        response.raw, encoding="utf-8", errors="replace", newline=""
                    )
                    length = response.headers.get("Content-Length", "")
                    return summarise(
                        text,
                        payload,
                        ctx,
                        position=response.raw.tell,
                        size=int(length) if length.isdigit() else None,
                    )
            except (requests.ConnectionError, requests.Timeout) as exc:
                raise RetryableError(f"fetching {source}: {exc}") from exc
        with _open_regular_file(source) as handle:
            fd = handle.fileno()
            return summarise(
                handle,
                payload,
                ctx,
                # The file's offset: bytes read so far, the buffers' read-ahead included.
                position=lambda: os.lseek(fd, 0, os.SEEK_CUR),
                size=os.fstat(fd).st_size,
            )


@contextmanager
def _fetch(url: str) -> Iterator[requests.Response]:
    """The streamed GET response of `url`, following at most MAX_REDIRECTS redirects.

    Redirects are followed here, not by requests: every hop goes through
    jobs.kinds.outbound, so its host is resolved once, checked, and connected
    to by the checked address. Raises PermanentError for a refused
    destination, a redirect to a non-http(s) URL or too many redirects;
    requests' errors propagate.
    """
    for _ in range(MAX_REDIRECTS + 1):
        with ExitStack() as hop:
            response = hop.enter_context(outbound.request("GET", url, timeout=(5, 30)))
            if not response.is_redirect:
                yield response
                return
            location = response.headers["Location"]
        target = urljoin(url, location)
        if not _is_url(target):
            raise PermanentError(f"{url} redirects to {location!r}, which is not http(s)")
        url = target
    raise PermanentError(f"more than {MAX_REDIRECTS} redirects fetching {url}")


def _open_regular_file(source: str) -> io.TextIOWrapper:
    """`source` opened as UTF-8 text (errors replaced) for the csv module.

    Opened by jobs.kinds.localfiles.open_beneath: component by component
    from its JOBS_CSV_ROOTS root, no symbolic link followed, checked with
    fstat before any read, so whatever the path became after submission
    only a regular file inside the root is read. Raises PermanentError
    (naming the path, never the content) otherwise.
    """
    fd = localfiles.open_beneath(source, settings.JOBS_CSV_ROOTS)
    try:
        return open(fd, encoding="utf-8", errors="replace", newline="")  # noqa: SIM115
    except BaseException:
        os.close(fd)
        raise


def summarise(
    lines: Iterator[str] | io.TextIOBase,
    payload: dict[str, Any],
    ctx: AttemptContext,
    *,
    position: Callable[[], int] | None = None,
    size: int | None = None,
) -> dict[str, Any]:
    """Column summaries of CSV text read row by row.

    Reports progress every CANCEL_CHECK_EVERY_ROWS rows: `position()` bytes
    read of `size` (None: unknown), and the rows so far.

    Returns {"rows": int, "columns": [per-column dict]}. Raises PermanentError
    for malformed CSV or more than MAX_COLUMNS columns; Cancelled when the
    attempt is cancelled.
    """
    reader = csv.reader(lines, delimiter=payload["delimiter"])
    columns: list[ColumnStats] = []
    rows = 0
    cap = payload["distinct_cap"]
    try:
        for index, row in enumerate(reader):
            if index == 0 and payload["has_header"]:
                columns = [
                    ColumnStats(name or f"column_{i + 1}", cap)
                    for i, name in enumerate(row[:MAX_COLUMNS])
                ]
                continue
            if len(row) > MAX_COLUMNS:
                raise PermanentError(
                    f"row {index + 1} has {len(row)} columns; at most {MAX_COLUMNS}"
                )
            while len(columns) < len(row):
                columns.append(ColumnStats(f"column_{len(columns) + 1}", cap))
            for stats, value in zip(columns, row, strict=False):
                stats.add(value)
            rows += 1
            if rows % CANCEL_CHECK_EVERY_ROWS == 0:
                ctx.raise_if_cancelled()
                if position is not None:
                    ctx.progress(position(), size, f"{rows:,} rows")
    except csv.Error as exc:
        raise PermanentError(f"malformed CSV near line {reader.line_num}: {exc}") from exc
    if position is not None:
        ctx.progress(position(), size or None, f"{rows:,} rows")
    return {"rows": rows, "columns": [c.summary() for c in columns]}
