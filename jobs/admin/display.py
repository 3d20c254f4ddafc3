"""Formatting for the admin pages: ids, times to the millisecond, durations, MiB, JSON.

Pure functions of values (no queries), so the list and the job page cost
nothing beyond the rows they show.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings

from jobs.models import Attempt, Job, JobStatus

MIB = 1024 * 1024
# Colours of the status badges (background, text); WCAG AA contrast on white text.
STATUS_COLOURS: dict[str, str] = {
    JobStatus.QUEUED: "#5a6b7b",
    JobStatus.RUNNING: "#1f6fb2",
    JobStatus.RETRYING: "#b35c00",
    JobStatus.SUCCEEDED: "#2e7d32",
    JobStatus.DEAD: "#c62828",
    JobStatus.CANCELLED: "#6d6d6d",
}
# The most of a payload or result the job page prints (characters).
JSON_DISPLAY_LIMIT = 100_000


def short_id(value: Any) -> str:
    """First 8 hex digits of a UUID: what the list shows and the search accepts."""
    return str(value)[:8]


def at_ms(value: datetime | None) -> str:
    """UTC time to the millisecond, "2026-01-31 12:00:00.123", or "–"."""
    if value is None:
        return "–"
    return value.strftime("%Y-%m-%d %H:%M:%S.") + f"{value.microsecond // 1000:03d}"


def seconds(value: float | None) -> str:
    """A duration: "0.512 s" below a minute, "3 m 05 s" below an hour, "2 h 03 m", or "–"."""
    if value is None:
        return "–"
    if value < 60:
        return f"{value:.3f} s"
    if value < 3600:
        return f"{int(value // 60)} m {int(value % 60):02d} s"
    if value < 86400:
        return f"{int(value // 3600)} h {int(value % 3600 // 60):02d} m"
    return f"{int(value // 86400)} d {int(value % 86400 // 3600):02d} h"


def age(value: datetime | None, now: datetime) -> str:
    """Coarse age for the list: "12 s", "4 m", "3 h", "2 d"."""
    if value is None:
        return "–"
    s = max(0.0, (now - value).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{int(s // size)} {unit}"
    return f"{int(s)} s"


def mib(value: int | None) -> str:
    """Bytes as MiB with one decimal ("61.3 MiB"), or "–"."""
    return "–" if value is None else f"{value / MIB:.1f} MiB"


def mib_delta(before: int | None, after: int | None) -> str:
    """Signed growth in MiB ("+1.2 MiB"), or "–" when either side is unknown."""
    if before is None or after is None:
        return "–"
    return f"{(after - before) / MIB:+.1f} MiB"


def first_line(text: str, limit: int = 120) -> str:
    """The first non-empty line of `text`, cut at `limit` characters."""
    for line in (text or "").splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def pretty_json(value: Any) -> str:
    """Indented JSON for a <pre> block, cut at JSON_DISPLAY_LIMIT characters."""
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    if len(text) > JSON_DISPLAY_LIMIT:
        return text[:JSON_DISPLAY_LIMIT] + f"\n… ({len(text) - JSON_DISPLAY_LIMIT} more characters)"
    return text


def trace_url(trace_id: str) -> str:
    """The trace UI link for `trace_id` (JOBS_TRACE_URL_TEMPLATE), or "" when unset or no id."""
    template = settings.JOBS_TRACE_URL_TEMPLATE
    return template.replace("{trace_id}", trace_id) if template and trace_id else ""


def trace_ui_url() -> str:
    """The trace UI's home: scheme and host of JOBS_TRACE_URL_TEMPLATE, or ""."""
    from urllib.parse import urlsplit

    template = settings.JOBS_TRACE_URL_TEMPLATE
    if not template:
        return ""
    parts = urlsplit(template)
    return f"{parts.scheme}://{parts.netloc}/"


@dataclass(frozen=True)
class AttemptRow:
    """One attempt as the job page shows it; times already formatted."""

    number: int
    outcome: str
    worker: str
    pid: str
    started: str
    finished: str
    duration: str
    waited_before: str
    planned_delay: str
    rss_before: str
    rss_after: str
    rss_growth: str
    error: str
    traceback: str
    trace_id: str
    trace_url: str


def attempt_rows(attempts: list[Attempt]) -> list[AttemptRow]:
    """Rows for `attempts` (oldest first) with the gap each one waited after the previous.

    `waited_before` is the measured gap (previous finish to this start);
    `planned_delay` is the backoff this attempt's failure chose for the next.
    """
    rows = []
    previous: Attempt | None = None
    for a in attempts:
        duration = (
            (a.finished_at - a.started_at).total_seconds()
            if a.finished_at and a.started_at
            else None
        )
        waited = (
            (a.started_at - previous.finished_at).total_seconds()
            if previous is not None and previous.finished_at and previous.number == a.number - 1
            else None
        )
        error = f"{a.error_type}: {a.error_message}" if a.error_type else a.error_message
        rows.append(
            AttemptRow(
                number=a.number,
                outcome=a.outcome or "running",
                worker=a.worker_hostname or "–",
                pid=str(a.worker_pid or "–"),
                started=at_ms(a.started_at),
                finished=at_ms(a.finished_at),
                duration=seconds(duration),
                waited_before=seconds(waited) if waited is not None else "",
                planned_delay=seconds(a.retry_delay_seconds)
                if a.retry_delay_seconds is not None
                else "",
                rss_before=mib(a.rss_before_bytes),
                rss_after=mib(a.rss_after_bytes),
                rss_growth=mib_delta(a.rss_before_bytes, a.rss_after_bytes),
                error=error,
                traceback=a.traceback,
                trace_id=a.trace_id,
                trace_url=trace_url(a.trace_id),
            )
        )
        previous = a
    return rows


def shown_error(job: Job) -> tuple[str, bool]:
    """(the job's last error, whether a later attempt recovered from it).

    A succeeded job keeps the error of an earlier failed attempt in
    `last_error`; it is shown as recovered, never as the job's error.
    """
    return job.last_error, bool(job.last_error) and job.status == JobStatus.SUCCEEDED
