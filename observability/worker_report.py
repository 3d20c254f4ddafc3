"""Each worker's own memory report for the admin overview: its format, and its Redis layout.

Where it is kept is the platform's state store (jobs.worker_reports: a
PostgreSQL table, or the Redis layout below).

The thread that writes it in the worker's main process: jobs.telemetry.worker_report.

Why a report the worker writes, not a broadcast the web sends: `celery
inspect stats` waits out its whole timeout for replies (it cannot know how
many workers exist), so the overview would take that long on every view, or
show a cached answer of unknown age; and a broadcast to a busy worker may not
be answered at all. Instead every worker's main process writes a small JSON
report (children's RSS and threads, the memory limit, children recycled by
reason) every JOBS_WORKER_REPORT_INTERVAL seconds, with a time-to-live of
three intervals, so a dead worker's report disappears by itself. Reading all
of them is two Redis round trips (ZRANGEBYSCORE, then MGET), bounded by
MAX_WORKERS, whatever the workers are doing.

Keys (on the broker's Redis): `jobs:worker-report:<node name>` (JSON, with
TTL) and the sorted set `jobs:worker-reports` (node name scored by the Unix
time of its last report, pruned by the writers).

A report:

    {"hostname": "worker-1@box", "at": 1767000000.5,
     "children": [{"pid": 4242, "rss_bytes": 61000000, "threads": 3}, ...],
     "main_rss_bytes": 58000000, "max_memory_per_child_bytes": 536870912,
     "recycled": {"max_tasks": 3, "worker_lost": 1}, "queues": ["default"]}

`recycled` are the totals of jobs_worker_children_recycled_total for this
worker's host, read from its own multiprocess metric files (the same numbers
its /metrics serves).
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from observability.multiproc import counter_totals, multiproc_dir

KEY_PREFIX = "jobs:worker-report:"
INDEX_KEY = "jobs:worker-reports"
MAX_WORKERS = 100
RECYCLED_FAMILY = "jobs_worker_children_recycled"


def recycled_by_reason() -> dict[str, int]:
    """{reason: children recycled} summed over this worker's metric files; {} when none are kept."""
    directory = multiproc_dir()
    if directory is None:
        return {}
    return counter_totals(directory, RECYCLED_FAMILY, "reason")


def write_report(client: Any, report: dict[str, Any], *, ttl: float) -> None:
    """Store `report` under its hostname for `ttl` seconds; prune expired index entries."""
    now = report["at"]
    pipe = client.pipeline(transaction=False)
    pipe.set(KEY_PREFIX + report["hostname"], json.dumps(report), px=int(ttl * 1000))
    pipe.zadd(INDEX_KEY, {report["hostname"]: now})
    pipe.zremrangebyscore(INDEX_KEY, "-inf", now - ttl)
    pipe.execute()


def read_reports(client: Any, *, max_age: float, now: float | None = None) -> list[dict[str, Any]]:
    """Live reports (newer than `max_age` seconds before `now`), newest first, at most MAX_WORKERS,
    each checked by `parse_report` (a report that is not one is left out).

    `now` (Unix seconds) must be on the writers' clock: the platform passes
    the database's (jobs.worker_reports); this host's clock when None.

    Raises redis.RedisError when Redis cannot be read.
    """
    names = client.zrevrangebyscore(
        INDEX_KEY,
        "+inf",
        (time.time() if now is None else now) - max_age,
        start=0,
        num=MAX_WORKERS,
    )
    if not names:
        return []
    prefix = KEY_PREFIX.encode()
    keys = [prefix + (n if isinstance(n, bytes) else str(n).encode()) for n in names]
    reports = []
    for raw in client.mget(keys):
        report = parse_report(raw)
        if report is not None:
            reports.append(report)
    return reports


# --- reports are untrusted input ---------------------------------------------
# Anyone who can write to the broker's Redis can write a report. The admin
# overview must show what is sound and drop the rest, never fail: every field
# is checked for its type and bounds here, at the one place reports are read.
MAX_REPORT_BYTES = 1_000_000
MAX_CHILDREN = 1000
MAX_REASONS = 50
MAX_TEXT = 255
MAX_COUNT = 2**63 - 1  # a BIGINT; also far inside float's range (the charts' widths)


def _count(value: Any) -> int | None:
    """A non-negative integer within MAX_COUNT, else None (bools, floats, strings are not)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
        return value
    return None


def _text(value: Any) -> str | None:
    if isinstance(value, str) and value and len(value) <= MAX_TEXT:
        return value
    return None


def _child(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    pid, rss, threads = (_count(value.get(k)) for k in ("pid", "rss_bytes", "threads"))
    if pid is None or rss is None or threads is None:
        return None
    owned = value.get("owned_bytes")
    return {"pid": pid, "rss_bytes": rss, "threads": threads, "owned_bytes": _count(owned)}


def _recycled(value: Any) -> dict[str, int]:
    if not isinstance(value, dict) or len(value) > MAX_REASONS:
        return {}
    counts = {reason: _count(n) for reason, n in value.items() if _text(reason) is not None}
    return {reason: n for reason, n in counts.items() if n is not None}


def _children(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        return []
    children = (_child(c) for c in value[:MAX_CHILDREN])
    return [c for c in children if c is not None]


def parse_report(raw: Any) -> dict[str, Any] | None:
    """The report in `raw` (JSON text or bytes) with only sound fields, or None.

    None when `raw` is not JSON of an object with a hostname. Children
    without an integer pid, RSS and thread count are dropped; a limit or
    count that is not a non-negative integer reads 0; `recycled` keeps the
    reasons with a count; at most MAX_CHILDREN children and MAX_REASONS
    reasons are read.
    """
    if not isinstance(raw, bytes | str) or not raw or len(raw) > MAX_REPORT_BYTES:
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested too deeply
        return None
    if not isinstance(value, dict) or _text(value.get("hostname")) is None:
        return None
    at = value.get("at")
    finite = isinstance(at, float) and math.isfinite(at)
    return {
        "hostname": value["hostname"],
        "at": at if finite else float(_count(at) or 0),
        "children": _children(value.get("children")),
        "main_rss_bytes": _count(value.get("main_rss_bytes")) or 0,
        "max_memory_per_child_bytes": _count(value.get("max_memory_per_child_bytes")) or 0,
        "recycled": _recycled(value.get("recycled")),
        # None: a report from before workers listed their queues (unknown, not none).
        "queues": _queues(value.get("queues")),
    }


def _queues(value: Any) -> list[str] | None:
    if not isinstance(value, list):
        return None
    names = (_text(name) for name in value[:MAX_REASONS])
    return [name for name in names if name is not None]
