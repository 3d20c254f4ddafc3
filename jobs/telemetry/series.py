"""Every series of the jobs domain whose labels are known in advance, created at 0.

Why: observability.series (a series first seen at 3 shows no increase).
Labels: registered kinds x configured queues x the enums (outcomes,
reasons, limits); the worker's own hostname series; the attempt task's
celery-exporter counters per queue.
"""

from __future__ import annotations

from django.conf import settings

from jobs import task_names
from jobs.decisions import RETRYABLE_OUTCOMES
from jobs.kinds.registry import kind_names
from jobs.models import AttemptOutcome, DeadReason
from jobs.reasons import DropReason, LeakResource, Limit, RecycleReason, RejectReason
from jobs.retention import PRUNED_STATUSES, PRUNED_TABLES
from observability import metrics as m
from observability.task_events import host_of

TASK_NAME = task_names.RUN_ATTEMPT
TERMINAL = ("succeeded", "dead", "cancelled")
LOST_SIGNALS = ("SIGKILL", "SIGSEGV", "SIGABRT", "SIGTERM")


def initialize(role: str, *, hostname: str | None = None) -> None:
    """Create at 0 every known series this process role can write (call after multiproc activation).

    `role` is "web", "scheduler" or "worker" (the worker's main process);
    `hostname` is the worker's host label (celery-exporter's host part).
    """
    kinds, queues = kind_names(), list(settings.JOBS_QUEUES)
    host = host_of(hostname)
    for queue in queues:
        m.celery_task_sent_total.labels(TASK_NAME, host, queue)
        for kind in kinds:
            m.jobs_submitted_total.labels(kind, queue)
            m.jobs_retry_budget_exhausted_total.labels(kind, queue)
            m.jobs_retry_budget_deferred_total.labels(kind, queue)
            m.jobs_retry_budget_fallback_total.labels(kind, queue)
            m.jobs_retry_delay_seconds.labels(kind, queue)
            m.jobs_messages_lost_total.labels(kind, queue)
            for rejected in RejectReason:
                m.jobs_rejected_total.labels(kind, queue, rejected)
            for outcome in AttemptOutcome.values:
                m.jobs_attempts_total.labels(kind, queue, outcome)
                m.jobs_attempt_duration_seconds.labels(kind, queue, outcome)
            for outcome in RETRYABLE_OUTCOMES:
                m.jobs_retries_total.labels(kind, queue, outcome)
            for outcome in TERMINAL:
                m.jobs_completed_total.labels(kind, queue, outcome)
                m.jobs_end_to_end_seconds.labels(kind, queue, outcome)
            for reason in DeadReason.values:
                m.jobs_dead_letters_total.labels(kind, queue, reason)
            for dropped in DropReason:
                m.jobs_duplicate_deliveries_total.labels(kind, queue, dropped)
            for limit in Limit:
                m.jobs_time_limits_hit_total.labels(kind, queue, limit)
                m.jobs_memory_limits_hit_total.labels(kind, queue, limit)
    for rejected in RejectReason:
        m.jobs_rejected_total.labels(m.UNKNOWN, m.UNKNOWN, rejected)
    for status in PRUNED_STATUSES:
        for table in PRUNED_TABLES:
            m.jobs_pruned_total.labels(status, table)
    for kind in kinds:
        m.jobs_attempt_rss_growth_bytes.labels(kind)
        for resource in LeakResource:
            m.jobs_leak_suspected_total.labels(kind, resource)
    if role == "worker":
        for recycled in RecycleReason:
            m.jobs_worker_children_recycled_total.labels(host, recycled)
        for signal_name in LOST_SIGNALS:
            m.jobs_workers_lost_total.labels(host, signal_name)
