"""The metric catalogue: every series the platform exports, defined once.

Dashboards, alerts and tests use these names and nothing else. Naming
follows Prometheus conventions (`_total`, `_seconds`, `_bytes`); labels are
low-cardinality (kind, queue, outcome, reason, exception class), never a
job id. Where celery-exporter exports the same thing we use its names and
labels (`name`, `hostname`, `queue_name`) so its public dashboards work on
our endpoints unchanged (danihodovic/celery-exporter, src/exporter.py).

In multiprocess mode (PROMETHEUS_MULTIPROC_DIR set, see observability.
multiproc) counters and histograms are summed over processes; gauges state
how they merge with `multiprocess_mode`.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# Attempt and end-to-end latencies of background jobs: 10 ms to 30 min.
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
# RSS growth of a child over one attempt: 0 B to 256 MiB.
RSS_GROWTH_BUCKETS = tuple(float(2**k) for k in range(10, 29, 2))  # 1 KiB .. 256 MiB
UNKNOWN = "_unknown"

# --- celery-exporter compatible -------------------------------------------
CELERY_TASK_LABELS = ("name", "hostname", "queue_name")
celery_task_sent_total = Counter("celery_task_sent", "Task messages published.", CELERY_TASK_LABELS)
celery_task_received_total = Counter(
    "celery_task_received", "Task messages received by a worker.", CELERY_TASK_LABELS
)
celery_task_started_total = Counter(
    "celery_task_started", "Tasks started in a worker child.", CELERY_TASK_LABELS
)
celery_task_succeeded_total = Counter(
    "celery_task_succeeded", "Tasks that returned without raising.", CELERY_TASK_LABELS
)
celery_task_failed_total = Counter(
    "celery_task_failed",
    "Tasks that raised, by exception class.",
    (*CELERY_TASK_LABELS, "exception"),
)
celery_task_retried_total = Counter(
    "celery_task_retried",
    "Tasks whose job will be retried (by the scheduler, never by Celery).",
    CELERY_TASK_LABELS,
)
celery_task_runtime = Histogram(
    "celery_task_runtime", "Task runtime in seconds.", CELERY_TASK_LABELS, buckets=DURATION_BUCKETS
)
# --- jobs: lifecycle -------------------------------------------------------
jobs_submitted_total = Counter("jobs_submitted", "Jobs accepted by the API.", ("kind", "queue"))
jobs_rejected_total = Counter(
    "jobs_rejected",
    "Submissions refused (reason: invalid, conflict, queue_full, too_large, unauthenticated).",
    ("kind", "queue", "reason"),
)
jobs_completed_total = Counter(
    "jobs_completed",
    "Jobs that reached a terminal state (outcome: succeeded, dead, cancelled).",
    ("kind", "queue", "outcome"),
)
jobs_attempts_total = Counter(
    "jobs_attempts", "Attempts ended, by outcome.", ("kind", "queue", "outcome")
)
jobs_retries_total = Counter(
    "jobs_retries",
    "Retries scheduled, by the outcome of the failed attempt.",
    ("kind", "queue", "reason"),
)
jobs_retry_budget_exhausted_total = Counter(
    "jobs_retry_budget_exhausted",
    "Retries refused because the kind's retry budget was spent.",
    ("kind", "queue"),
)
jobs_dead_letters_total = Counter(
    "jobs_dead_letters",
    "Jobs moved to the dead-letter set, by reason.",
    ("kind", "queue", "reason"),
)
jobs_duplicate_deliveries_total = Counter(
    "jobs_duplicate_deliveries",
    "Deliveries acknowledged without running (reason: live, terminal, stale).",
    ("kind", "queue", "reason"),
)
jobs_attempts_in_flight = Gauge(
    "jobs_attempts_in_flight",
    "Attempts running now.",
    ("kind", "queue"),
    multiprocess_mode="livesum",
)
jobs_attempt_duration_seconds = Histogram(
    "jobs_attempt_duration_seconds",
    "Attempt wall time.",
    ("kind", "queue", "outcome"),
    buckets=DURATION_BUCKETS,
)
jobs_end_to_end_seconds = Histogram(
    "jobs_end_to_end_seconds",
    "Submission to terminal state.",
    ("kind", "queue", "outcome"),
    buckets=DURATION_BUCKETS,
)
jobs_time_limits_hit_total = Counter(
    "jobs_time_limits_hit",
    "Attempts ended by a time limit (limit: soft, hard).",
    ("kind", "queue", "limit"),
)

# --- jobs: workers and memory ----------------------------------------------
jobs_attempt_rss_growth_bytes = Histogram(
    "jobs_attempt_rss_growth_bytes",
    "Child RSS after minus before one attempt (growth only).",
    ("kind",),
    buckets=RSS_GROWTH_BUCKETS,
)
jobs_worker_children_recycled_total = Counter(
    "jobs_worker_children_recycled",
    "Worker children replaced (reason: max_tasks, max_memory, hard_time_limit, worker_lost).",
    ("hostname", "reason"),
)
jobs_workers_lost_total = Counter(
    "jobs_workers_lost", "Worker children that died mid-attempt, by signal.", ("hostname", "signal")
)
jobs_leak_suspected_total = Counter(
    "jobs_leak_suspected",
    "Attempts that left resources behind (resource: threads, memory).",
    ("kind", "resource"),
)

# --- computed at scrape time (observability.collectors) ---------------------
# Read from shared state when scraped, so they are right in every process
# and after any crash. {name: (type, labels, help)}
SCRAPE_TIME_SERIES: dict[str, tuple[str, tuple[str, ...], str]] = {
    # web /metrics
    "jobs_queue_depth": (
        "gauge",
        ("queue", "state"),
        "Jobs per queue by state: ready, reserved, scheduled, unpublished.",
    ),
    "celery_queue_length": (
        "gauge",
        ("queue_name",),
        "Ready messages in the broker queue (all priority sub-queues).",
    ),
    "jobs_queue_oldest_age_seconds": ("gauge", ("queue",), "Age of the oldest queued job."),
    "jobs_dead_letters": ("gauge", ("kind", "reason"), "Jobs in the dead-letter set now."),
    # worker /metrics (main process)
    "celery_worker_up": ("gauge", ("hostname",), "1 while the worker serves metrics."),
    "celery_worker_tasks_active": ("gauge", ("hostname",), "Tasks running now."),
    "jobs_worker_max_memory_per_child_bytes": (
        "gauge",
        ("hostname",),
        "Configured worker_max_memory_per_child.",
    ),
    "jobs_worker_child_rss_bytes": (
        "gauge",
        ("hostname", "pid"),
        "Resident memory of each live worker child.",
    ),
    "jobs_worker_child_threads": (
        "gauge",
        ("hostname", "pid"),
        "Live threads of each worker child.",
    ),
    "jobs_worker_main_rss_bytes": (
        "gauge",
        ("hostname",),
        "Resident memory of the worker's main process.",
    ),
}


def scrape_family(name: str):
    """A GaugeMetricFamily for catalogue entry `name` of SCRAPE_TIME_SERIES. Raises KeyError."""
    from prometheus_client.core import GaugeMetricFamily

    _, labels, help_text = SCRAPE_TIME_SERIES[name]
    return GaugeMetricFamily(name, help_text, labels=list(labels))
