"""Every reason vocabulary of the jobs domain, one StrEnum each.

Metric labels, log lines, events and tests use these members and iterate
these enums (jobs.telemetry.series creates each label set at 0). The values
are Prometheus label values, read by platform/prometheus/alerts.yml and the
Grafana dashboards: renaming one is a breaking change. Job states, attempt
outcomes and dead reasons are the models' TextChoices (jobs.models).
"""

from __future__ import annotations

from enum import StrEnum

from observability.memory import LeakResource

__all__ = [
    "AbortReason",
    "DropReason",
    "LeakResource",
    "Limit",
    "RecycleReason",
    "RejectReason",
    "StateStore",
    "TickOutcome",
]


class AbortReason(StrEnum):
    """Why the supervisor flagged, then aborted, a running attempt (jobs.supervisor.AttemptAbort)."""

    SOFT_TIMEOUT = "soft_timeout"  # past the kind's soft time limit
    CANCELLED = "cancelled"  # a cancel request
    MEMORY_LIMIT = "memory_limit"  # past the kind's soft memory limit (jobs.memory_guard)


class DropReason(StrEnum):
    """Why a delivery was dropped unrun (jobs_duplicate_deliveries_total's `reason`)."""

    LIVE = "live"  # another attempt of the job holds a live lease
    TERMINAL = "terminal"  # the job already ended
    STALE = "stale"  # the message is for an attempt other than the job's next one
    BUDGET = "budget"  # a retry held at its start by the retry budget


class RejectReason(StrEnum):
    """Why a submission was refused (jobs_rejected_total's `reason`)."""

    INVALID = "invalid"
    CONFLICT = "conflict"  # idempotency key reused with another payload
    QUEUE_FULL = "queue_full"
    TOO_LARGE = "too_large"  # request body over the limit
    UNAUTHENTICATED = "unauthenticated"


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


class Limit(StrEnum):
    """Which limit of a kind was hit: time (jobs_time_limits_hit_total) or memory
    (jobs_memory_limits_hit_total), the `limit` label."""

    SOFT = "soft"
    HARD = "hard"


class StateStore(StrEnum):
    """Where shared state that is not a message lives (JOBS_STATE_STORE, jobs.state_store)."""

    POSTGRES = "postgres"  # the database: one statement per hot decision
    REDIS = "redis"  # the broker's Redis (make demo, on SQLite)


class TickOutcome(StrEnum):
    """What became of a periodic schedule's tick (jobs_schedule_ticks_total's `outcome`).

    `created` and `caught_up` made a job; the others are the skip reasons.
    """

    CREATED = "created"  # the tick's job was submitted on time (within JOBS_SCHEDULE_MISSED_AFTER)
    CAUGHT_UP = "caught_up"  # the one job for the ticks missed meanwhile (missed policy catch_up)
    MISSED = "missed"  # no job: missed (no leader, disabled pass) and skipped or folded into one
    OVERLAP = "overlap"  # no job: the schedule's previous job was still live (overlap skip)
    REJECTED = "rejected"  # no job: the submission was refused (queue full, invalid)
