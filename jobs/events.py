"""Domain events, sent by jobs.services after the change is committed.

Telemetry subscribes to these (observability.signals); services never
import metrics. Every signal is sent with `sender=Job` and keyword arguments:

- job_submitted(job)
- job_rejected(kind, queue, reason)       reason: invalid, conflict, queue_full, too_large, unauthenticated
- attempt_started(job, attempt)           in the process that runs it
- attempt_finished(job, attempt, decision)
                                          `job` after the change; `decision` is the one
                                          retry-or-dead verdict (jobs.decisions.Decision) on a
                                          failed attempt, None after a success or when the job
                                          had moved on
- job_completed(job)                      the job reached succeeded, dead or cancelled
- attempt_progress(kind, queue, ratio)    a running attempt's progress was written
                                          (jobs.progress; ratio in 0..1, None when the
                                          total is unknown), in the process that runs it
- delivery_dropped(job, reason)           reason: live, terminal, stale, budget (a retry
                                          held at its start by the retry budget)
- leak_suspected(kind, resource)          resource: threads, memory (in the worker child)
- message_lost(job)                       a queued job's message vanished from the broker;
                                          the scheduler republishes it
- memory_limit_hit(kind, queue, limit)    limit: soft, hard (jobs.memory_guard, worker child)
- child_recycling(hostname, reason)       this worker child is about to be replaced
                                          (reason: a RecycleReason)
"""

from enum import StrEnum

from django.dispatch import Signal


class RecycleReason(StrEnum):
    """Why a worker child was replaced (jobs_worker_children_recycled_total's `reason`)."""

    MAX_TASKS = "max_tasks"  # worker_max_tasks_per_child reached
    MAX_MEMORY = "max_memory"  # owned memory past the per-child limit after an attempt
    MEMORY_LIMIT = "memory_limit"  # ended mid-attempt by a kind's hard memory limit
    HARD_TIME_LIMIT = "hard_time_limit"  # killed by billiard at a hard time limit
    WORKER_LOST = "worker_lost"  # died mid-attempt (signal, crash)
    # Retired after an attempt ended by an exception injected into the kind's
    # code (the supervisor's abort, Celery's soft time limit): whatever that
    # code held (a lock, an import, a half-written connection) is suspect.
    ABORTED = "aborted"


job_submitted = Signal()
job_rejected = Signal()
attempt_started = Signal()
attempt_finished = Signal()
job_completed = Signal()
attempt_progress = Signal()
delivery_dropped = Signal()
leak_suspected = Signal()
message_lost = Signal()
memory_limit_hit = Signal()
child_recycling = Signal()
