"""Formatting for the admin pages: ids, times to the millisecond, durations, MiB, JSON.

Pure functions of values (no queries), so the list and the job page cost
nothing beyond the rows they show.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from jobs.models import Attempt, Job, JobStatus

MIB = 1024 * 1024
# Colours of the status badges (background, text); WCAG AA contrast on white text.
STATUS_COLOURS: dict[str, str] = {
    JobStatus.QUEUED: "#5a6b7b",
    JobStatus.DELAYED: "#5e548e",
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


def until(value: datetime | None, now: datetime) -> str:
    """A time to come: "2026-01-31 12:00:00.123 (in 52 s)"; "" for None; no "(in …)" once past."""
    if value is None:
        return ""
    ahead = (value - now).total_seconds()
    return at_ms(value) + (f" (in {age(now, value)})" if ahead >= 1 else "")


def mib(value: int | None) -> str:
    """Bytes as MiB with one decimal ("61.3 MiB"), or "–"."""
    return "–" if value is None else f"{value / MIB:.1f} MiB"


def mib_delta(before: int | None, after: int | None) -> str:
    """Signed growth in MiB ("+1.2 MiB"), or "–" when either side is unknown."""
    if before is None or after is None:
        return "–"
    return f"{(after - before) / MIB:+.1f} MiB"


def breakable(text: str) -> SafeString:
    """`text` escaped, with a line-break opportunity after each ".", "_" and "-" (kind and queue
    names), so a narrow column wraps "webhook.deliver" as "webhook." / "deliver"."""
    return mark_safe(re.sub(r"([._-])", r"\1<wbr>", escape(text)))  # escaped first


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

    template = settings.JOBS_TRACE_URL_TEMPLATE
    if not template:
        return ""
    parts = urlsplit(template)
    return f"{parts.scheme}://{parts.netloc}/"


@dataclass(frozen=True)
class AttemptRow:
    """One attempt as the job page shows it; times already formatted.

    `run_time`: its start to its end; `wait`: before it (the previous
    attempt's end, or the job's creation for attempt 1, to its start);
    `next_delay`: the retry delay its failure chose for the next attempt.
    """

    number: int
    outcome: str
    worker: str
    pid: str
    started: str
    finished: str
    run_time: str
    wait: str
    next_delay: str
    rss_before: str
    rss_after: str
    rss_growth: str
    error: str
    traceback: str
    trace_id: str
    trace_url: str


def _gap(start: datetime | None, end: datetime | None) -> float | None:
    # Never negative: a job's creation is stamped by the web host's clock,
    # attempts by the database's (jobs.clock); they may differ by milliseconds.
    return max(0.0, (end - start).total_seconds()) if start and end else None


def attempt_rows(
    attempts: list[Attempt], *, created_at: datetime | None = None
) -> list[AttemptRow]:
    """Rows for `attempts` (oldest first, in number order); `created_at` is the job's creation.

    The wait before attempt 1 is measured from `created_at`; before any
    other, from the previous attempt's end (when that attempt is listed).
    """
    rows = []
    previous: Attempt | None = None
    for a in attempts:
        if a.number == 1:
            waited = _gap(created_at, a.started_at)
        elif previous is not None and previous.number == a.number - 1:
            waited = _gap(previous.finished_at, a.started_at)
        else:
            waited = None
        error = f"{a.error_type}: {a.error_message}" if a.error_type else a.error_message
        rows.append(
            AttemptRow(
                number=a.number,
                outcome=a.outcome or "running",
                worker=a.worker_hostname or "–",
                pid=str(a.worker_pid or "–"),
                started=at_ms(a.started_at),
                finished=at_ms(a.finished_at),
                run_time=seconds(_gap(a.started_at, a.finished_at)),
                wait=seconds(waited) if waited is not None else "",
                next_delay=seconds(a.retry_delay_seconds)
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


def progress_text(job: Any) -> str:
    """The job's last progress report as people read it ("42% · 4,200 of 10,000 rows"), or ""."""
    if job.progress_done is None:
        return ""
    done, total = job.progress_done, job.progress_total
    if total:
        head = f"{min(100.0, 100 * done / total):.0f}% ({done:,.0f} of {total:,.0f})"
    else:
        head = f"{done:,.0f} done"
    return f"{head} · {job.progress_message}" if job.progress_message else head
