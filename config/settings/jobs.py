"""Settings of the job platform itself (JOBS_*)."""

from __future__ import annotations

from kombu import Queue

from config.env import BASE_DIR, env, metrics_root
from config.settings.celery import (
    JOBS_BROKER_KIND,
    JOBS_RABBITMQ_DEAD_LETTER_EXCHANGE,
    JOBS_RABBITMQ_DELIVERY_LIMIT,
)

# Queues the API accepts and the worker consumes, and the most ready messages
# each may hold before the API answers 503 (backpressure).
JOBS_QUEUES: list[str] = env.list("JOBS_QUEUES", default=["default"])
JOBS_QUEUE_MAX_READY: int = env.int("JOBS_QUEUE_MAX_READY", default=10_000)
# Per-queue override, e.g. "default=10000,reports=200".
JOBS_QUEUE_MAX_READY_OVERRIDES: dict[str, int] = {
    name: int(limit)
    for name, limit in env.dict("JOBS_QUEUE_MAX_READY_OVERRIDES", default={}).items()
}
# Seconds one web process reuses its count of a queue's unpublished rows (the
# outbox part of backpressure; jobs.selectors.queue_ready_count). 0: count on
# every submission.
JOBS_BACKPRESSURE_OUTBOX_CACHE_SECONDS: float = env.float(
    "JOBS_BACKPRESSURE_OUTBOX_CACHE_SECONDS", default=1.0
)
# Seconds a web process gathers `published_at` stamps before its writer
# thread commits them in one statement (jobs.services.publish_stamps); 0
# writes each in the submitting request. 0..0.25 (jobs.E007).
JOBS_PUBLISH_STAMP_DELAY_SECONDS: float = env.float(
    "JOBS_PUBLISH_STAMP_DELAY_SECONDS", default=0.05
)
# Seconds one web process reuses its reading of a queue's ready messages while
# that reading (plus what it admitted since) is below half the queue's limit
# (jobs.selectors.queue_ready_count). 0: read the broker on every submission.
JOBS_BACKPRESSURE_READY_CACHE_SECONDS: float = env.float(
    "JOBS_BACKPRESSURE_READY_CACHE_SECONDS", default=0.5
)
# Seconds a client is told to wait when a queue is full.
JOBS_BACKPRESSURE_RETRY_AFTER: int = env.int("JOBS_BACKPRESSURE_RETRY_AFTER", default=5)
# Largest accepted request body (bytes) for POST /api/jobs/.
JOBS_MAX_REQUEST_BYTES: int = env.int("JOBS_MAX_REQUEST_BYTES", default=256 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = JOBS_MAX_REQUEST_BYTES * 2
# Deepest nesting of JSON objects and arrays accepted below a top-level field
# of a request body (`payload` itself is level 1); deeper is refused with 400.
# Recursive code downstream (DRF, json.dumps, the request fingerprint) needs
# headroom below Python's recursion limit of 1000: jobs.E003 caps it at 200.
JOBS_JSON_MAX_DEPTH: int = env.int("JOBS_JSON_MAX_DEPTH", default=64)

# Per-kind policy overrides as JSON, e.g.
# {"demo.flaky": {"max_attempts": 3, "backoff_base": 0.2, "soft_time_limit": 5}}
JOBS_KIND_OVERRIDES: dict = env.json("JOBS_KIND_OVERRIDES", default={})

# Django's Tasks framework (django.tasks on 6.x, the django-tasks backport on
# 5.2): every @task function runs as a platform job, its dotted path the kind
# (jobs.taskbackend; per-task policy in JOBS_KIND_OVERRIDES under that name).
TASKS = {"default": {"BACKEND": "jobs.taskbackend.JobsBackend"}}

# Scheduler: how often it looks for due retries and unpublished rows (seconds),
# how old an unpublished row must be before the sweep republishes it, and how
# many rows one pass handles.
JOBS_SCHEDULER_INTERVAL: float = env.float("JOBS_SCHEDULER_INTERVAL", default=0.25)
# Least seconds between two writes of a running attempt's progress (jobs.progress);
# below 0, progress reports are dropped unwritten (AttemptContext.progress does nothing).
JOBS_PROGRESS_INTERVAL: float = env.float("JOBS_PROGRESS_INTERVAL", default=0.25)
JOBS_SWEEP_UNPUBLISHED_AFTER: float = env.float("JOBS_SWEEP_UNPUBLISHED_AFTER", default=5.0)
JOBS_SCHEDULER_BATCH: int = env.int("JOBS_SCHEDULER_BATCH", default=500)
# Scheduler replicas (jobs.leadership, docs/scheduler.md): any number may run;
# the one holding the lease row leads, judged by the database's clock. The
# leader renews every RENEW seconds for LEASE seconds; a standby tries as
# often, so a dead leader is replaced within LEASE + RENEW seconds. RENEW must
# be below LEASE (jobs.E021). An unpublished row is claimed for OUTBOX_CLAIM
# seconds before it is published, so no other scheduler publishes it meanwhile.
JOBS_SCHEDULER_LEASE_SECONDS: float = env.float("JOBS_SCHEDULER_LEASE_SECONDS", default=10.0)
JOBS_SCHEDULER_RENEW_SECONDS: float = env.float("JOBS_SCHEDULER_RENEW_SECONDS", default=2.0)
JOBS_OUTBOX_CLAIM_SECONDS: float = env.float("JOBS_OUTBOX_CLAIM_SECONDS", default=30.0)
# Periodic schedules (jobs.periodic, docs/periodic.md). A tick whose job is
# created more than MISSED_AFTER seconds after its due time counts as missed
# (its schedule's missed policy: skip, or one catch-up job); it must exceed a
# leader takeover (LEASE + RENEW). Schedules declared in code: JOBS_SCHEDULES
# ({name: {"kind" or "task", "cron" or "every", ...}}), the platform's own
# defaults first (jobs.periodic.declared.DEFAULT_SCHEDULES), then the
# JOBS_SCHEDULES environment variable (JSON) for operators.
JOBS_SCHEDULE_MISSED_AFTER: float = env.float("JOBS_SCHEDULE_MISSED_AFTER", default=60.0)
JOBS_SCHEDULES: dict[str, dict] = env.json("JOBS_SCHEDULES", default={})
# Lost messages (jobs.services.lost_messages): every CHECK_INTERVAL seconds
# the scheduler looks for queued jobs whose message is in no broker queue and
# no consumer's hands (a flush, eviction, failover, a delivery to a dead
# consumer) and republishes those found by two consecutive checks, so within
# MARGIN + 2 x CHECK_INTERVAL (+ a pass) of the queue reaching them: 22 s by
# default. MARGIN (seconds) absorbs a worker host's clock, which stamps a
# requeue after a lost child, against the database's.
JOBS_LOST_MESSAGE_CHECK_INTERVAL: float = env.float(
    "JOBS_LOST_MESSAGE_CHECK_INTERVAL", default=10.0
)
JOBS_LOST_MESSAGE_MARGIN: float = env.float("JOBS_LOST_MESSAGE_MARGIN", default=2.0)
# A queued job whose message a consumer has held unacknowledged (not started)
# for longer than this (seconds, timed by the scheduler from its first
# sighting) is published again: that consumer is most likely dead (a SIGKILLed
# host), and kombu would restore the message only after the visibility
# timeout. A live worker starts a delivered job within milliseconds (prefetch
# 1, acks_late), and a duplicate delivery is dropped unrun, so this only costs
# a message. The scheduler also republishes every queued job at once when the
# broker's run_id changes (a restart).
JOBS_REPUBLISH_AFTER: float = env.float("JOBS_REPUBLISH_AFTER", default=60.0)
# Seconds of jitter between an attempt's start and its request reaching the
# destination that a kind's `rate` allows for: "20/s" lets 21 starts span 1 s
# plus this, so the destination counts at most 20 (+ burst) in any second
# (jobs.gcra.interval_of; docs/flow-control.md, "Rate limits"). 0 to 1 s.
JOBS_RATE_DISPATCH_MARGIN: float = env.float("JOBS_RATE_DISPATCH_MARGIN", default=0.0)
# How long a unit of database work (starting or recording an attempt) is
# retried on a fresh connection after the connection was lost (jobs.db); an
# attempt's outcome that still cannot be written is spooled to Redis for the
# scheduler (jobs.services.outcomes).
JOBS_DB_RETRY_SECONDS: float = env.float("JOBS_DB_RETRY_SECONDS", default=20.0)
# The same bound for the worker's main process (hard time limits, lost
# children): it blocks the consumer's event loop meanwhile (no task received,
# no other time limit enforced), and what it could not write is recorded
# later anyway (the lease sweep, or the redelivery's start).
JOBS_MAIN_DB_RETRY_SECONDS: float = env.float("JOBS_MAIN_DB_RETRY_SECONDS", default=2.0)
# After a broker call failed (a frozen or partitioned Redis fails each call
# only after the socket timeout), seconds during which a process skips the
# calls it can do without: the backpressure count and a publish the outbox
# sweep redoes. Keeps requests fast during a broker outage.
JOBS_BROKER_BACKOFF_SECONDS: float = env.float("JOBS_BROKER_BACKOFF_SECONDS", default=2.0)
# Extra seconds past the hard time limit before a running attempt's lease is
# treated as expired (the attempt can no longer be alive).
JOBS_LEASE_GRACE: float = env.float("JOBS_LEASE_GRACE", default=30.0)
# The engine's two attempt statements on PostgreSQL are prepared once per
# connection and then executed by name (jobs.engine.backends.pg_statement).
# Turn off behind a pooler in transaction mode that cannot keep prepared
# statements (PgBouncer before 1.21).
JOBS_ENGINE_PREPARED: bool = env.bool("JOBS_ENGINE_PREPARED", default=True)
# After the scheduler regains the database, seconds it waits before judging
# leases: workers write the outcomes they kept on disk during the outage
# first (jobs.spool_drainer), so a finished attempt is not called lost.
JOBS_LEASE_RECOVERY_GRACE: float = env.float("JOBS_LEASE_RECOVERY_GRACE", default=10.0)
# Where a worker keeps outcomes the database would not take (one file each,
# fsynced); empty: var/outcomes/<database digest> under the project. Keep
# it on a volume that outlives the container. Polled every
# JOBS_OUTCOME_SPOOL_POLL seconds by the worker's main process.
JOBS_OUTCOME_SPOOL_DIR: str = env.str("JOBS_OUTCOME_SPOOL_DIR", default="")
JOBS_OUTCOME_SPOOL_POLL: float = env.float("JOBS_OUTCOME_SPOOL_POLL", default=1.0)

# Local files `report.csv_summary` may read: only below these directories.
JOBS_CSV_ROOTS: list[str] = env.list("JOBS_CSV_ROOTS", default=[str(BASE_DIR / "var" / "data")])

# The worker consumes every configured queue. On RabbitMQ each is a quorum
# queue with a delivery limit and a dead-letter exchange (docs/brokers.md);
# the same declaration is made by every publisher and consumer.
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_QUEUES = [
    Queue(
        name,
        queue_arguments={
            "x-queue-type": "quorum",
            "x-delivery-limit": JOBS_RABBITMQ_DELIVERY_LIMIT,
            "x-dead-letter-exchange": JOBS_RABBITMQ_DEAD_LETTER_EXCHANGE,
        },
    )
    if JOBS_BROKER_KIND == "rabbitmq"
    else Queue(name)
    for name in JOBS_QUEUES
]

# Fault-injection kinds (demo.sleep, demo.crash): on for local use and tests.
JOBS_FAULT_KINDS: bool = env.bool("JOBS_FAULT_KINDS", default=True)
# Seconds between an attempt's cancellation flag (soft limit or cancel) and
# the AttemptAbort that ends code which ignores the flag.
JOBS_ABORT_GRACE: float = env.float("JOBS_ABORT_GRACE", default=1.0)
# Deliveries ending in worker loss before a job is dead with reason "poison".
JOBS_POISON_AFTER: int = env.int("JOBS_POISON_AFTER", default=3)
# Seconds a cancellation request stays visible to the running attempt.
JOBS_CANCEL_TTL: int = env.int("JOBS_CANCEL_TTL", default=3600)

# Where shared state that is not a message lives (docs/state-store.md): the
# retry budget's counters, cancellation requests, the workers' reports.
# "postgres": the database (one statement per decision, judged by its now());
# "redis": the broker's Redis (the budget's: JOBS_RETRY_BUDGET_REDIS_URL if
# set), as `make demo` runs on SQLite. Empty (the default): postgres when the database is PostgreSQL, else
# redis (jobs.state_store). A store that cannot work refuses to start (jobs.E030).
JOBS_STATE_STORE: str = env.str("JOBS_STATE_STORE", default="")
# PostgreSQL store: a process counts the first attempts it started in memory
# and writes them at most every FLUSH seconds (one statement per process, not
# per attempt), and always with its next retry decision; 0 writes each one.
JOBS_RETRY_BUDGET_FLUSH_SECONDS: float = env.float("JOBS_RETRY_BUDGET_FLUSH_SECONDS", default=1.0)
# PostgreSQL store: seconds between a running attempt's reads of its job's
# status (a cancel stops it within this, plus the abort grace if it ignores it).
JOBS_CANCEL_POLL_SECONDS: float = env.float("JOBS_CANCEL_POLL_SECONDS", default=0.5)

# Retry budget per kind (jobs.budget, a window counter in the state store shared
# by every worker): in each WINDOW seconds, retries may not exceed RATIO x first attempts
# + FLOOR (after Envoy's 20%). A floor of 10 lets a few failing jobs retry
# unhindered at low traffic (one webhook.deliver makes up to 5 retries: with
# a floor of 3, a lone one was held a minute); a storm is bounded by the ratio.
# A retry over budget is deferred to the next window with room, at most
# MAX_DEFERRAL seconds past its backoff, else its job is dead with reason
# "budget". With the Redis state store the counter lives in JOBS_RETRY_BUDGET_REDIS_URL (default:
# the broker's); a decision that cannot reach its store (Redis within TIMEOUT
# seconds) keeps its normal backoff and counts jobs_retry_budget_fallback_total.
JOBS_RETRY_BUDGET_WINDOW: float = env.float("JOBS_RETRY_BUDGET_WINDOW", default=60.0)
JOBS_RETRY_BUDGET_RATIO: float = env.float("JOBS_RETRY_BUDGET_RATIO", default=0.2)
JOBS_RETRY_BUDGET_FLOOR: int = env.int("JOBS_RETRY_BUDGET_FLOOR", default=10)
JOBS_RETRY_BUDGET_MAX_DEFERRAL: float = env.float("JOBS_RETRY_BUDGET_MAX_DEFERRAL", default=300.0)
JOBS_RETRY_BUDGET_REDIS_URL: str = env.str("JOBS_RETRY_BUDGET_REDIS_URL", default="")
JOBS_RETRY_BUDGET_REDIS_TIMEOUT: float = env.float("JOBS_RETRY_BUDGET_REDIS_TIMEOUT", default=0.25)
# Key prefix of the budget's hashes (one per kind and window).
JOBS_RETRY_BUDGET_KEY_PREFIX: str = env.str(
    "JOBS_RETRY_BUDGET_KEY_PREFIX", default="jobs:retry-budget:"
)

# Telemetry. prometheus-client multiprocess directories live under this root,
# one per role: web/ (served by the web's /metrics), scheduler/ (by the
# scheduler's) and worker-<node name>/ (by that worker's main process).
JOBS_METRICS_DIR: str = str(metrics_root())
# Worker /metrics, served by the worker's main process; 0 turns it off.
JOBS_WORKER_METRICS_PORT: int = env.int("JOBS_WORKER_METRICS_PORT", default=9808)
JOBS_WORKER_METRICS_ADDR: str = env.str("JOBS_WORKER_METRICS_ADDR", default="127.0.0.1")
# Scheduler /metrics: its own counters and which workers are up (from Celery's
# worker events); 0 turns it off.
JOBS_SCHEDULER_METRICS_PORT: int = env.int("JOBS_SCHEDULER_METRICS_PORT", default=9809)
JOBS_SCHEDULER_METRICS_ADDR: str = env.str("JOBS_SCHEDULER_METRICS_ADDR", default="127.0.0.1")
# Seconds each dependency probe of a scrape may take (jobs_broker_up,
# jobs_database_up; observability.probes): well under Prometheus's scrape timeout
# (10 s), which a slow probe would otherwise turn into the target looking down.
# libpq waits at least 2 s for a connection whatever this says.
JOBS_METRICS_PROBE_TIMEOUT: float = env.float("JOBS_METRICS_PROBE_TIMEOUT", default=2.0)
# celery_worker_up goes to 0 when a worker's last heartbeat (every 2 s) is
# older than this (seconds), and its series is dropped this long after it was
# last seen (celery-exporter's purge default).
JOBS_WORKER_OFFLINE_AFTER: float = env.float("JOBS_WORKER_OFFLINE_AFTER", default=30.0)
JOBS_WORKER_FORGET_AFTER: float = env.float("JOBS_WORKER_FORGET_AFTER", default=600.0)
# Leak checks: an attempt that leaves threads alive is flagged at once; RSS
# growth above the threshold (bytes) for K consecutive attempts of one kind is.
JOBS_LEAK_RSS_THRESHOLD_BYTES: int = env.int(
    "JOBS_LEAK_RSS_THRESHOLD_BYTES", default=2 * 1024 * 1024
)
JOBS_LEAK_RSS_CONSECUTIVE: int = env.int("JOBS_LEAK_RSS_CONSECUTIVE", default=5)
# Memory guard (jobs.memory_guard): a watchdog thread in each worker child
# samples, every SAMPLE_INTERVAL seconds, the memory the running attempt has
# made the child own (resident memory grown since the attempt began). Past
# the kind's soft limit (bytes) the attempt's cancellation flag is set; past
# its hard limit the attempt is recorded `memory_limit` and the child exits
# (the pool forks a new one). Kinds may override both (policy fields
# soft_memory_limit / hard_memory_limit, JOBS_KIND_OVERRIDES); 0 turns one off.
JOBS_MEMORY_SAMPLE_INTERVAL: float = env.float("JOBS_MEMORY_SAMPLE_INTERVAL", default=0.1)
JOBS_MEMORY_SOFT_LIMIT_BYTES: int = env.int(
    "JOBS_MEMORY_SOFT_LIMIT_BYTES", default=256 * 1024 * 1024
)
JOBS_MEMORY_HARD_LIMIT_BYTES: int = env.int(
    "JOBS_MEMORY_HARD_LIMIT_BYTES", default=512 * 1024 * 1024
)
# Bytes the worker's main process allocates and touches before its pool
# forks: stands in for a heavy import (a large model) in tests and drills.
# 0 (the default) allocates nothing.
JOBS_WORKER_BALLAST_BYTES: int = env.int("JOBS_WORKER_BALLAST_BYTES", default=0)
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
# (false) itself. The name is resolved once and the connection pinned to the
# checked address (jobs.kinds.outbound): DNS rebinding cannot pass the check.
JOBS_ALLOW_PRIVATE_DESTINATIONS: bool = env.bool("JOBS_ALLOW_PRIVATE_DESTINATIONS", default=True)

# Admin (jobs.admin). Links shown on the job page and the overview; empty
# hides them. JOBS_TRACE_URL_TEMPLATE holds "{trace_id}" (32 hex digits),
# e.g. Jaeger as docker-compose.yml publishes it,
# "http://localhost:16686/trace/{trace_id}", or Tempo behind Grafana:
# http://localhost:3000/explore?left={"datasource":"tempo","queries":[{"query":"{trace_id}"}]}
JOBS_TRACE_URL_TEMPLATE: str = env.str("JOBS_TRACE_URL_TEMPLATE", default="")
JOBS_FLOWER_URL: str = env.str("JOBS_FLOWER_URL", default="")
JOBS_GRAFANA_URL: str = env.str("JOBS_GRAFANA_URL", default="")
# Counts below this are exact; above it the admin shows PostgreSQL's estimate
# (jobs.estimates), so a page never counts a big table row by row.
JOBS_ADMIN_EXACT_COUNT_LIMIT: int = env.int("JOBS_ADMIN_EXACT_COUNT_LIMIT", default=20_000)
# Admin actions: up to INLINE jobs are changed in the request; larger
# selections (up to MAX) run as background jobs of kind `admin.bulk_action`,
# BATCH jobs each.
JOBS_ADMIN_ACTION_INLINE: int = env.int("JOBS_ADMIN_ACTION_INLINE", default=100)
JOBS_ADMIN_ACTION_BATCH: int = env.int("JOBS_ADMIN_ACTION_BATCH", default=500)
JOBS_ADMIN_ACTION_MAX: int = env.int("JOBS_ADMIN_ACTION_MAX", default=50_000)
# Worker reports for the admin overview (jobs.telemetry.worker_report): each
# worker's main process writes its children's RSS and recycles to Redis
# every INTERVAL seconds (0 turns it off); a report expires after 3 intervals.
JOBS_WORKER_REPORT_INTERVAL: float = env.float("JOBS_WORKER_REPORT_INTERVAL", default=5.0)
# Retention (jobs.retention, docs/retention.md): terminal jobs older than these
# ages (since they finished) are deleted with their attempts and History by
# `manage.py jobs_prune` or the `jobs.prune` kind. An age is a number and a unit
# (s, m, h, d, w: "7d", "36h"), or "off" to keep that status forever. A job with
# an idempotency key is kept at least KEYED_AFTER, so its key still refuses a
# duplicate for that long. One batch deletes at most BATCH jobs in its own short
# transaction, sized to last about BATCH_TARGET_MS; after a batch of t seconds
# the prune rests t * (1 - DUTY_CYCLE) / DUTY_CYCLE (at least PAUSE seconds), so
# it deletes at most DUTY_CYCLE of the time and yields the rest to live work
# (jobs.prune_pace; jobs.E040 refuses nonsense).
JOBS_PRUNE_SUCCEEDED_AFTER: str = env.str("JOBS_PRUNE_SUCCEEDED_AFTER", default="7d")
JOBS_PRUNE_CANCELLED_AFTER: str = env.str("JOBS_PRUNE_CANCELLED_AFTER", default="14d")
JOBS_PRUNE_DEAD_AFTER: str = env.str("JOBS_PRUNE_DEAD_AFTER", default="30d")
JOBS_PRUNE_KEYED_AFTER: str = env.str("JOBS_PRUNE_KEYED_AFTER", default="7d")
JOBS_PRUNE_BATCH: int = env.int("JOBS_PRUNE_BATCH", default=500)
JOBS_PRUNE_PAUSE_SECONDS: float = env.float("JOBS_PRUNE_PAUSE_SECONDS", default=0.05)
JOBS_PRUNE_DUTY_CYCLE: float = env.float("JOBS_PRUNE_DUTY_CYCLE", default=0.4)
JOBS_PRUNE_BATCH_TARGET_MS: int = env.int("JOBS_PRUNE_BATCH_TARGET_MS", default=100)
