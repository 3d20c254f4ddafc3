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
    "FuseState",
    "LeakResource",
    "Limit",
    "PauseScope",
    "RecycleReason",
    "RejectReason",
    "StateStore",
    "TickOutcome",
    "WaitingReason",
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
    PAUSED = "paused"  # its kind or queue is paused: the job waits in the database (jobs.pauses)
    CONCURRENCY = "concurrency"  # its kind (key) has all its concurrency slots live: it waits
    FUSE = "fuse"  # its kind's (destination's) fuse is open: it waits (jobs.fuse_gate)
    RATE = "rate"  # its kind (key) started as many attempts as its rate allows: it waits


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


class PauseScope(StrEnum):
    """What a pause stops (jobs.pauses): every job of one kind, or every job of one queue."""

    KIND = "kind"
    QUEUE = "queue"


class WaitingReason(StrEnum):
    """Why a job that is neither running nor terminal does not start (jobs.waiting).

    Stored on the row (`Job.waiting_reason`) where the decision to hold the
    job is made; the live ones (backpressure, no worker) are computed when a
    job is shown (jobs.waiting_now). `label` is the admin's short form.
    """

    BACKOFF = "backoff"  # a retry waits out its backoff
    RETRY_AFTER = "retry_after"  # a retry waits as long as the failure asked
    RETRY_BUDGET = "retry_budget"  # a retry moved to a later slot by the kind's retry budget
    RUN_AFTER = "run_after"  # submitted with a later start
    PAUSED = "paused"  # its kind or queue is paused (jobs.pauses)
    BACKPRESSURE = "backpressure"  # its queue holds as many ready jobs as it may (503 to submits)
    NO_WORKER = "no_worker"  # no live worker consumes its queue
    CONCURRENCY_LIMIT = "concurrency_limit"  # every concurrency slot of its kind (key) is live
    RATE_LIMIT = "rate_limit"  # its kind (key) started as many attempts as its rate allows
    FUSE_OPEN = "fuse_open"  # its kind's (destination's) fuse is open (jobs.fuse_gate)

    @property
    def label(self) -> str:
        """The short form the admin list shows."""
        return _WAITING_LABELS.get(self.value, self.value.replace("_", " "))


_WAITING_LABELS = {"retry_after": "Retry-After", "no_worker": "no worker"}


class FuseState(StrEnum):
    """A fuse's state (jobs.fuse_rules): a circuit breaker per kind (and destination).

    `gauge` is its value in jobs_fuse_state (0 closed, 1 half-open, 2 open).
    """

    CLOSED = "closed"  # attempts start; failures are counted over the window
    OPEN = "open"  # no attempt starts until the cool-down ends
    HALF_OPEN = "half_open"  # one probe attempt runs; its end closes or re-opens the fuse

    @property
    def gauge(self) -> int:
        """jobs_fuse_state's value: 0 closed, 1 half-open, 2 open."""
        return {"closed": 0, "half_open": 1, "open": 2}[self.value]
