"""Settings of the job platform itself (JOBS_*)."""

from __future__ import annotations

from kombu import Queue

from config.env import BASE_DIR, env, metrics_root

# Queues the API accepts and the worker consumes, and the most ready messages
# each may hold before the API answers 503 (backpressure).
JOBS_QUEUES: list[str] = env.list("JOBS_QUEUES", default=["default"])
JOBS_QUEUE_MAX_READY: int = env.int("JOBS_QUEUE_MAX_READY", default=10_000)
# Per-queue override, e.g. "default=10000,reports=200".
JOBS_QUEUE_MAX_READY_OVERRIDES: dict[str, int] = {
    name: int(limit)
    for name, limit in env.dict("JOBS_QUEUE_MAX_READY_OVERRIDES", default={}).items()
}
# Seconds a client is told to wait when a queue is full.
JOBS_BACKPRESSURE_RETRY_AFTER: int = env.int("JOBS_BACKPRESSURE_RETRY_AFTER", default=5)
# Largest accepted request body (bytes) for POST /api/jobs/.
JOBS_MAX_REQUEST_BYTES: int = env.int("JOBS_MAX_REQUEST_BYTES", default=256 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = JOBS_MAX_REQUEST_BYTES * 2

# Per-kind policy overrides as JSON, e.g.
# {"demo.flaky": {"max_attempts": 3, "backoff_base": 0.2, "soft_time_limit": 5}}
JOBS_KIND_OVERRIDES: dict = env.json("JOBS_KIND_OVERRIDES", default={})

# Scheduler: how often it looks for due retries and unpublished rows (seconds),
# how old an unpublished row must be before the sweep republishes it, and how
# many rows one pass handles.
JOBS_SCHEDULER_INTERVAL: float = env.float("JOBS_SCHEDULER_INTERVAL", default=0.25)
JOBS_SWEEP_UNPUBLISHED_AFTER: float = env.float("JOBS_SWEEP_UNPUBLISHED_AFTER", default=5.0)
JOBS_SCHEDULER_BATCH: int = env.int("JOBS_SCHEDULER_BATCH", default=500)
# Queued jobs published longer ago than this (seconds) are published again:
# a broker that restarted without persistence, was flushed or evicted keys
# has lost their messages. A duplicate delivery is dropped unrun, so this
# only costs a message. The scheduler also republishes at once when the
# broker's run_id changes (a restart).
JOBS_REPUBLISH_AFTER: float = env.float("JOBS_REPUBLISH_AFTER", default=600.0)
# Extra seconds past the hard time limit before a running attempt's lease is
# treated as expired (the attempt can no longer be alive).
JOBS_LEASE_GRACE: float = env.float("JOBS_LEASE_GRACE", default=30.0)

# Local files `report.csv_summary` may read: only below these directories.
JOBS_CSV_ROOTS: list[str] = env.list("JOBS_CSV_ROOTS", default=[str(BASE_DIR / "var" / "data")])

# The worker consumes every configured queue.
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_QUEUES = [Queue(name) for name in JOBS_QUEUES]

# Fault-injection kinds (demo.sleep, demo.crash): on for local use and tests.
JOBS_FAULT_KINDS: bool = env.bool("JOBS_FAULT_KINDS", default=True)
# Seconds between an attempt's cancellation flag (soft limit or cancel) and
# the AttemptAbort that ends code which ignores the flag.
JOBS_ABORT_GRACE: float = env.float("JOBS_ABORT_GRACE", default=1.0)
# Deliveries ending in worker loss before a job is dead with reason "poison".
JOBS_POISON_AFTER: int = env.int("JOBS_POISON_AFTER", default=3)
# Seconds a cancellation request stays visible to the running attempt.
JOBS_CANCEL_TTL: int = env.int("JOBS_CANCEL_TTL", default=3600)

# Retry budget per kind: over the last WINDOW seconds, retries started may not
# exceed RATIO x first attempts started + FLOOR; past it, retries are deferred
# by WINDOW seconds and jobs_retry_budget_exhausted_total counts them.
JOBS_RETRY_BUDGET_WINDOW: float = env.float("JOBS_RETRY_BUDGET_WINDOW", default=60.0)
JOBS_RETRY_BUDGET_RATIO: float = env.float("JOBS_RETRY_BUDGET_RATIO", default=1.0)
JOBS_RETRY_BUDGET_FLOOR: int = env.int("JOBS_RETRY_BUDGET_FLOOR", default=10)

# Telemetry. prometheus-client multiprocess directories live under this root,
# one per role: web/, scheduler/ (both served by the web's /metrics) and
# worker-<node name>/ (served by that worker's main process).
JOBS_METRICS_DIR: str = str(metrics_root())
# Worker /metrics, served by the worker's main process; 0 turns it off.
JOBS_WORKER_METRICS_PORT: int = env.int("JOBS_WORKER_METRICS_PORT", default=9808)
JOBS_WORKER_METRICS_ADDR: str = env.str("JOBS_WORKER_METRICS_ADDR", default="127.0.0.1")
# Leak checks: an attempt that leaves threads alive is flagged at once; RSS
# growth above the threshold (bytes) for K consecutive attempts of one kind is.
JOBS_LEAK_RSS_THRESHOLD_BYTES: int = env.int(
    "JOBS_LEAK_RSS_THRESHOLD_BYTES", default=2 * 1024 * 1024
)
JOBS_LEAK_RSS_CONSECUTIVE: int = env.int("JOBS_LEAK_RSS_CONSECUTIVE", default=5)
# Dumps on demand (`celery -A config inspect jobs_dump`): when true, every
# worker child traces allocations with tracemalloc (started after fork, so
# only the child's own allocations count), keeping FRAMES frames each; the
# dump then lists the top allocation sites. Costs CPU and memory: off by default.
JOBS_TRACEMALLOC: bool = env.bool("JOBS_TRACEMALLOC", default=False)
JOBS_TRACEMALLOC_FRAMES: int = env.int("JOBS_TRACEMALLOC_FRAMES", default=1)
# Tracing: OTLP is configured by the standard OTEL_* variables (off when no
# endpoint is set); a JSON-lines file exporter for tests and local debugging.
JOBS_OTEL_SPAN_FILE: str = env.str("JOBS_OTEL_SPAN_FILE", default="")
OTEL_EXPORTER_OTLP_ENDPOINT: str = env.str("OTEL_EXPORTER_OTLP_ENDPOINT", default="")
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: str = env.str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", default="")
OTEL_SDK_DISABLED: bool = env.bool("OTEL_SDK_DISABLED", default=False)
OTEL_SERVICE_NAME: str = env.str("OTEL_SERVICE_NAME", default="django-jobs")

# SSRF guard (jobs.kinds.netguard) for webhook.deliver and report.csv_summary
# URLs: when false, a destination whose host is, or resolves to, a loopback,
# private, link-local, reserved, multicast or unspecified address is refused
# (400 at submit for a literal address, PermanentError when the attempt runs).
# Default true here because local development, `make demo` and the tests
# deliver to receivers on 127.0.0.1; this module is star-imported at the end
# of base.py and cannot see DEBUG, so production.py sets the safe default
# (false) itself. DNS rebinding is not covered: see jobs/kinds/netguard.py.
JOBS_ALLOW_PRIVATE_DESTINATIONS: bool = env.bool("JOBS_ALLOW_PRIVATE_DESTINATIONS", default=True)
