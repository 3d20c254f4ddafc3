"""`report.csv_summary`: stream a CSV and summarise each column.

Memory is bounded whatever the file size: rows are read one at a time and
each column keeps O(1) numbers plus at most `distinct_cap` distinct values.
Local paths must lie under settings.JOBS_CSV_ROOTS; URLs must be http(s).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import requests
from django.conf import settings
from django.core.validators import URLValidator
from rest_framework import serializers

from jobs.kinds.base import AttemptContext, Kind, PermanentError, RetryableError
from jobs.kinds.registry import register
from jobs.policy import Policy

NULL_TOKENS = frozenset({"", "null", "none", "na", "n/a", "nan"})
MAX_COLUMNS = 1000
CANCEL_CHECK_EVERY_ROWS = 2000


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


class CsvSummaryPayload(serializers.Serializer):
    source = serializers.CharField(max_length=4096, help_text="http(s) URL or local path")
    delimiter = serializers.CharField(min_length=1, max_length=1, default=",")
    has_header = serializers.BooleanField(default=True)
    distinct_cap = serializers.IntegerField(min_value=1, max_value=100_000, default=1000)

    def validate_source(self, value: str) -> str:
        if _is_url(value):
            URLValidator(schemes=["http", "https"])(value)
            return value
        try:
            return str(resolve_local_source(value))
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from exc


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
        source = payload["source"]
        if _is_url(source):
            try:
                with requests.get(source, stream=True, timeout=(5, 30)) as response:
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
                    return summarise(text, payload, ctx)
            except (requests.ConnectionError, requests.Timeout) as exc:
                raise RetryableError(f"fetching {source}: {exc}") from exc
        try:
            handle = open(source, encoding="utf-8", errors="replace", newline="")  # noqa: SIM115
        except FileNotFoundError as exc:
            raise PermanentError(f"no such file: {source}") from exc
        with handle:
            return summarise(handle, payload, ctx)


def summarise(
    lines: Iterator[str] | io.TextIOBase, payload: dict[str, Any], ctx: AttemptContext
) -> dict[str, Any]:
    """Column summaries of CSV text read row by row.

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
    except csv.Error as exc:
        raise PermanentError(f"malformed CSV near line {reader.line_num}: {exc}") from exc
    return {"rows": rows, "columns": [c.summary() for c in columns]}
