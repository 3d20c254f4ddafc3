"""The overview page's context: jobs.overview reads turned into tables and SVG charts."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from jobs import overview
from jobs.admin import charts, display
from jobs.reasons import RecycleReason


def _node(hostname: str) -> str:
    """A Celery node name short enough for a chart label: "worker-17…@box" -> "worker-17…@box"."""
    name, _, host = hostname.partition("@")
    name = name if len(name) <= 12 else name[:11] + "…"
    return f"{name}@{host}" if host else name


def context() -> dict[str, Any]:
    """Everything overview.html shows. Bounded: see jobs.overview's query budget."""
    statuses = overview.status_counts()
    window = overview.attempts_last_hour()
    memory = overview.worker_memory()
    dead = overview.dead_by_reason()
    kind_charts = [
        {
            "kind": k.kind,
            "first": k.total_first,
            "retries": k.total_retries,
            "chart": charts.stacked_columns(
                f"attempts-{k.kind}",
                f"{k.kind}: first attempts and retries per {window.bucket_minutes} minutes",
                k.first,
                k.retries,
                start_label=f"-{window.minutes} min",
                end_label="now",
            ),
        }
        for k in window.kinds
    ]
    # The per-child limit judges owned memory (RSS grown since fork): shown
    # against it when the child reported it, its RSS otherwise.
    rss_items = [
        (
            f"{_node(c.hostname)} · pid {c.pid}"
            + (" (RSS)" if c.owned_bytes is None else f" (RSS {display.mib(c.rss_bytes)})"),
            float(c.rss_bytes if c.owned_bytes is None else c.owned_bytes),
            float(memory.limits.get(c.hostname) or 0) or None,
        )
        for c in memory.children
    ]
    # Every reason the worker counts, zeros included: "none yet" is an answer too.
    reasons = sorted({str(r) for r in RecycleReason} | set(memory.recycled))
    recycle_items = [(r, float(memory.recycled.get(r, 0)), None) for r in reasons]
    dead_items = [
        (reason, float(sum(kinds.values())), None) for reason, kinds in sorted(dead.items())
    ]
    return {
        "status_rows": [
            (s, statuses.counts[s], statuses.exact[s], display.STATUS_COLOURS.get(s, "#555"))
            for s in statuses.counts
        ],
        "any_estimated": not all(statuses.exact.values()),
        "kind_charts": kind_charts,
        "window": window,
        "depths": sorted(overview.queue_depths().items()),
        "memory": memory,
        "rss_chart": charts.horizontal_bars(
            "worker-rss",
            "Worker children's owned memory (RSS grown since fork) against the per-child limit",
            rss_items,
            fmt=lambda v: display.mib(int(v)),
        ),
        "recycle_chart": charts.horizontal_bars(
            "recycles", "Worker children recycled, by reason", recycle_items, fmt=lambda v: f"{v:g}"
        ),
        "dead_chart": charts.horizontal_bars(
            "dead-reasons", "Dead jobs by reason", dead_items, fmt=lambda v: f"{v:g}"
        ),
        "dead_rows": [
            (reason, kind, n)
            for reason, kinds in sorted(dead.items())
            for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1])
        ],
        "schedules": overview.schedules(),
        "links": [
            (name, url)
            for name, url in (
                ("Flower", settings.JOBS_FLOWER_URL),
                ("Grafana", settings.JOBS_GRAFANA_URL),
                ("Trace UI", display.trace_ui_url()),
            )
            if url
        ],
    }
