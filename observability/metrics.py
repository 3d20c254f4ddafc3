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
from prometheus_client.core import GaugeMetricFamily

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
    "celery_task_started", "Tasks started in a worker child (task-started).", CELERY_TASK_LABELS
)
# The state counters move with the task events the worker sends, as
# celery-exporter counts them (observability.task_events): an attempt that
# failed is never a success (jobs.task_states).
celery_task_succeeded_total = Counter(
    "celery_task_succeeded",
    "Attempts that succeeded (task-succeeded, state SUCCESS).",
    CELERY_TASK_LABELS,
)
celery_task_failed_total = Counter(
    "celery_task_failed",
    "Attempts whose job is dead (task-failed, state FAILURE), by the attempt's exception class.",
    (*CELERY_TASK_LABELS, "exception"),
)
celery_task_retried_total = Counter(
    "celery_task_retried",
    "Failed attempts with another attempt scheduled (task-retried, state RETRY; "
    "the scheduler republishes, never Celery).",
    CELERY_TASK_LABELS,
)
celery_task_revoked_total = Counter(
    "celery_task_revoked",
    "Attempts ended by cancelling their job (task-revoked, state REVOKED).",
    CELERY_TASK_LABELS,
)
celery_task_rejected_total = Counter(
    "celery_task_rejected",
    "Messages rejected by the worker (task-rejected), e.g. requeued after a lost child "
    "that could not be recorded.",
    CELERY_TASK_LABELS,
)
celery_task_runtime = Histogram(
    "celery_task_runtime",
    "Runtime of succeeded tasks in seconds (task-succeeded's runtime, as celery-exporter).",
    CELERY_TASK_LABELS,
    buckets=DURATION_BUCKETS,
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
jobs_retry_delay_seconds = Histogram(
    "jobs_retry_delay_seconds",
    "Wait before the next attempt, as the retry decision chose it (0 for a lost worker's requeue).",
    ("kind", "queue"),
    buckets=DURATION_BUCKETS,
)
jobs_retry_budget_exhausted_total = Counter(
    "jobs_retry_budget_exhausted",
    "Retries refused at their backoff's time because the kind's retry budget was spent "
    "(then deferred, or dead with reason budget).",
    ("kind", "queue"),
)
jobs_retry_budget_deferred_total = Counter(
    "jobs_retry_budget_deferred",
    "Retries the kind's retry budget deferred to its next free slot.",
    ("kind", "queue"),
)
jobs_retry_budget_fallback_total = Counter(
    "jobs_retry_budget_fallback",
    "Retry decisions made without the retry budget (its Redis unreachable): "
    "the retry kept its backoff.",
    ("kind", "queue"),
)
jobs_dead_letters_total = Counter(
    "jobs_dead_letters",
    "Jobs moved to the dead-letter set, by reason.",
    ("kind", "queue", "reason"),
)
jobs_duplicate_deliveries_total = Counter(
    "jobs_duplicate_deliveries",
    "Deliveries acknowledged without running (reason: live, terminal, stale, budget).",
    ("kind", "queue", "reason"),
)
jobs_messages_lost_total = Counter(
    "jobs_messages_lost",
    "Queued jobs whose broker message vanished (in no queue and no consumer's hands), "
    "republished by the scheduler.",
    ("kind", "queue"),
)
# Periodic schedules (jobs.periodic): counted by the leading scheduler. Labelled by
# schedule name: schedules are declared by developers and operators, a few dozen at most.
jobs_schedule_ticks_total = Counter(
    "jobs_schedule_ticks",
    "Ticks of periodic schedules, by outcome: created or caught_up (a job was submitted), "
    "missed, overlap or rejected (skipped, no job).",
    ("schedule", "outcome"),
)
# Lag between a tick's due time (with its jitter) and its job's creation: 0.1 s to 5 min.
SCHEDULE_LAG_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 15, 30, 60, 300)
jobs_schedule_lag_seconds = Histogram(
    "jobs_schedule_lag_seconds",
    "Seconds from a tick's due time to the creation of its job (ticks created on time).",
    ("schedule",),
    buckets=SCHEDULE_LAG_BUCKETS,
)
jobs_attempts_in_flight = Gauge(
    "jobs_attempts_in_flight",
    "Attempts running now.",
    ("kind", "queue"),
    multiprocess_mode="livesum",
)
jobs_attempt_progress_ratio = Gauge(
    "jobs_attempt_progress_ratio",
    "Latest progress (done / total, 0 to 1) a running attempt of the kind reported "
    "(AttemptContext.progress); 0 once it ended. Max over live worker children.",
    ("kind", "queue"),
    multiprocess_mode="livemax",
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
jobs_memory_limits_hit_total = Counter(
    "jobs_memory_limits_hit",
    "Attempts that went past their kind's memory limit (limit: soft, the attempt was asked to "
    "stop; hard, it was ended with its child).",
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
    "Worker children replaced (reason: max_tasks; max_memory, owned memory past the per-child "
    "limit after an attempt; memory_limit, ended mid-attempt by a hard memory limit; "
    "hard_time_limit; worker_lost).",
    ("hostname", "reason"),
)
jobs_worker_child_attempts_total = Counter(
    "jobs_worker_child_attempts",
    "Attempts each worker child ended, by kind and outcome. child: its pool index (0 to "
    "concurrency-1), which a replacement child takes over, so there are as many series as "
    "the pool has places; hard_timeout and worker_lost are recorded by the main process and "
    "not counted here.",
    ("hostname", "child", "kind", "outcome"),
)
jobs_worker_child_owned_bytes = Gauge(
    "jobs_worker_child_owned_bytes",
    "Memory each live worker child owns: its RSS grown since it was forked, what the per-child "
    "limit judges (jobs.memory_guard); read at child start and after each attempt.",
    ("hostname",),
    multiprocess_mode="liveall",  # one series per live child (a pid label is added)
)
jobs_workers_lost_total = Counter(
    "jobs_workers_lost", "Worker children that died mid-attempt, by signal.", ("hostname", "signal")
)
jobs_leak_suspected_total = Counter(
    "jobs_leak_suspected",
    "Attempts that left resources behind (resource: threads, memory).",
    ("kind", "resource"),
)
jobs_pruned_total = Counter(
    "jobs_pruned",
    "Rows deleted by retention (manage.py jobs_prune, kind jobs.prune), by the status of "
    "their job and table (jobs_job, jobs_attempt).",
    ("status", "table"),
)

# --- computed at scrape time (observability.collectors, jobs.telemetry.collectors) ---
# Read from shared state when scraped, so they are right in every process
# and after any crash. {name: (type, labels, help)}
SCRAPE_TIME_SERIES: dict[str, tuple[str, tuple[str, ...], str]] = {
    # web /metrics; jobs_queue_depth and jobs_queue_oldest_age_seconds on the scheduler's
    # too (the backlog alerts' inputs outlive the web): dashboards and alerts take max.
    "jobs_queue_depth": (
        "gauge",
        ("queue", "state"),
        "Jobs per queue by state: ready, reserved, scheduled, unpublished, delayed.",
    ),
    # web and scheduler /metrics (jobs.telemetry.backlog): the autoscaling signal,
    # from the database alone (docs/scaling.md); scalers take max over processes.
    "jobs_backlog": (
        "gauge",
        ("queue", "state"),
        "Jobs per queue that want a worker slot, from the database: waiting (queued, or a "
        "retry or delayed start already due) and running (attempts in flight).",
    ),
    "celery_queue_length": (
        "gauge",
        ("queue_name",),
        "Ready messages in the broker queue (all priority sub-queues).",
    ),
    "jobs_queue_oldest_age_seconds": ("gauge", ("queue",), "Age of the oldest queued job."),
    "jobs_dead_letters": ("gauge", ("kind", "reason"), "Jobs in the dead-letter set now."),
    "jobs_retry_budget_used": (
        "gauge",
        ("kind",),
        "Retries counted against the kind's retry budget in its current window.",
    ),
    "jobs_retry_budget_limit": (
        "gauge",
        ("kind",),
        "Retries the kind's retry budget allows in its current window "
        "(ratio x first attempts so far + floor).",
    ),
    # web /metrics (jobs.telemetry.collectors.PauseCollector, from the Pause table)
    "jobs_paused": (
        "gauge",
        ("scope", "name"),
        "1 while the kind (scope=kind) or queue (scope=queue) is paused, else 0; every "
        "registered kind and configured queue.",
    ),
    "jobs_paused_seconds": (
        "gauge",
        ("scope", "name"),
        "Seconds since the kind or queue was paused (the database's clock); 0 while not paused.",
    ),
    # web /metrics (jobs.telemetry.concurrency.ConcurrencyCollector, from the job table)
    "jobs_concurrency_waiting": (
        "gauge",
        ("kind",),
        "Queued jobs waiting in the database for a concurrency slot of their kind (held, or "
        "released and not started yet); every kind with a concurrency limit.",
    ),
    "jobs_concurrency_limit": (
        "gauge",
        ("kind",),
        "The kind's concurrency limit: live attempts at most (per key value when the kind "
        "sets concurrency_key); every kind with a limit.",
    ),
    # web /metrics (jobs.telemetry.fuses.FuseCollector, from the Fuse table)
    "jobs_fuse_state": (
        "gauge",
        ("kind", "destination"),
        'State of the kind\'s fuse for a destination host ("*": the whole kind): 0 closed, '
        "1 half-open (one probe attempt runs), 2 open (no attempt starts); every fuse, and "
        'destination "*" of every registered kind (0 for a kind without a fuse).',
    ),
    "jobs_fuse_trips_total": (
        "counter",
        ("kind", "destination"),
        "Times the fuse went from closed to open (by its failure ratio or an operator).",
    ),
    # web /metrics (jobs.telemetry.rates.RateCollector, from the job table)
    "jobs_rate_waiting": (
        "gauge",
        ("kind",),
        "Queued jobs waiting in the database for their kind's rate limit (held, or released "
        "and not started yet); every kind with a rate.",
    ),
    "jobs_rate_limit_per_second": (
        "gauge",
        ("kind",),
        "The kind's rate limit in attempt starts per second (per key value when the kind sets "
        "rate_key); every kind with a rate.",
    ),
    # web and scheduler /metrics (observability.probes): each probes its dependencies
    # when scraped, so an outage is named by the processes that still answer.
    "jobs_broker_up": (
        "gauge",
        (),
        "1 when this process could open a connection to the Celery broker at scrape time "
        "(JOBS_METRICS_PROBE_TIMEOUT), 0 when it could not.",
    ),
    "jobs_database_up": (
        "gauge",
        (),
        "1 when this process could connect to the database and run SELECT 1 at scrape time "
        "(JOBS_METRICS_PROBE_TIMEOUT), 0 when it could not.",
    ),
    # scheduler /metrics (observability.worker_monitor, from Celery's worker events)
    "celery_worker_up": (
        "gauge",
        ("hostname",),
        "1 while a worker of this host heartbeats; 0 after it stopped (kept 10 min).",
    ),
    "celery_worker_tasks_active": (
        "gauge",
        ("hostname",),
        "Tasks the host's workers are running, from their last heartbeat.",
    ),
    # scheduler /metrics (jobs.leadership): one scheduler of any number leads
    "jobs_scheduler_leader": (
        "gauge",
        (),
        "1 while this scheduler holds the leadership lease (it promotes retries and sweeps "
        "the outbox), 0 while it stands by; summed over schedulers it should be 1.",
    ),
    # scheduler /metrics (jobs.telemetry.schedules): from the schedule rows, any scheduler
    "jobs_schedule_overdue_seconds": (
        "gauge",
        ("schedule",),
        "Seconds an enabled schedule's next tick is past its due time (database clock); "
        "0 while not due. Stays above a few seconds only while no leader creates ticks.",
    ),
    # worker /metrics (main process)
    "jobs_worker_max_memory_per_child_bytes": (
        "gauge",
        ("hostname",),
        "Per-child limit on owned memory (JOBS_WORKER_MAX_MEMORY_PER_CHILD_BYTES; 0: none).",
    ),
    "jobs_worker_child_rss_bytes": (
        "gauge",
        ("hostname", "pid"),
        "Resident memory of each live worker child, pages shared with the main process included "
        "(jobs_worker_child_owned_bytes is what the per-child limit judges).",
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

    _, labels, help_text = SCRAPE_TIME_SERIES[name]
    return GaugeMetricFamily(name, help_text, labels=list(labels))
