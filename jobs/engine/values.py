"""Value types the engine's operations take and return (jobs.engine; re-exported by jobs.services).

An attempt ending with one of RETRYABLE_OUTCOMES may be retried, policy
permitting (jobs.decisions). `Effects` collects what an operation sends
once its transaction commits; only the engine's boundary sends it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.dispatch import Signal

from jobs.decisions import RETRYABLE_OUTCOMES, Decision
from jobs.models import AttemptOutcome, Job, JobStatus
from jobs.policy import Policy

__all__ = [
    "RETRYABLE_OUTCOMES",
    "AttemptRef",
    "Delivery",
    "Effects",
    "JobRef",
    "Loss",
    "Moved",
    "Sweep",
    "AttemptEnd",
    "AttemptRun",
    "AttemptReport",
    "StartedAttempt",
    "SubmitResult",
    "without_nul",
]


def without_nul(value: Any) -> Any:
    """`value` with every NUL character in strings and keys replaced by U+FFFD.

    PostgreSQL's text and jsonb cannot hold NUL (0x00); a receiver's error
    body or a CSV header may contain one.
    """
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {without_nul(k): without_nul(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [without_nul(v) for v in value]
    return value


@dataclass(frozen=True)
class SubmitResult:
    """`created` is False when an idempotent resubmission returned the existing job."""

    job: Job
    created: bool


@dataclass(frozen=True)
class StartedAttempt:
    """What the runner needs to execute one attempt."""

    job_id: uuid.UUID
    kind: str
    payload: dict[str, Any]
    attempt: int
    max_attempts: int
    policy: Policy
    queue: str = "default"
    trace_parent: str = ""


@dataclass(frozen=True)
class AttemptReport:
    """How an attempt ended, as the runner saw it.

    `retryable` is whether the failure may be retried; `retry_after` is the
    least delay (seconds) the failure asked for.
    """

    outcome: AttemptOutcome
    result: Any = None
    error_type: str = ""
    error_message: str = ""
    traceback: str = ""
    retryable: bool = True
    retry_after: float | None = None
    trace_id: str = ""
    # The exception itself, in the process that ran the attempt (never stored):
    # the Celery task raises from it, so Flower's traceback shows where it failed.
    exception: BaseException | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class AttemptEnd:
    """What recording the end of an attempt did.

    `status` is the job's status after the change, or None when nothing was
    decided (the attempt was already recorded, e.g. by the lease sweep, or
    the job had moved on, e.g. cancelled while it ran); `job_status` is the
    job's status either way ("" when the job is gone). `decision` is the
    retry-or-dead verdict on a failed attempt (None after a success or when
    nothing was decided). `outcome` is the attempt's recorded outcome,
    `attempt` its number and `max_attempts` the job's (0 when unknown).
    `spooled` is True when the outcome could not be written yet and waits in
    Redis for the scheduler (jobs.services.outcomes): nothing is decided.
    """

    status: str | None
    job_status: str = ""
    decision: Decision | None = None
    outcome: str = ""
    next_attempt_at: Any = None  # datetime (UTC) of the next attempt when retrying
    attempt: int = 0
    max_attempts: int = 0
    spooled: bool = False

    @classmethod
    def after(cls, job: Job, attempt: int, outcome: str, decision: Decision | None) -> AttemptEnd:
        """What recording attempt `attempt` (ended with `outcome`) did to `job`, read after it."""
        return cls(
            status=job.status,
            job_status=job.status,
            decision=decision,
            outcome=outcome,
            next_attempt_at=job.next_attempt_at if job.status == JobStatus.RETRYING else None,
            attempt=attempt,
            max_attempts=job.max_attempts,
        )


@dataclass(frozen=True)
class AttemptRun:
    """One delivery handled by the runner (jobs.runner.execute_attempt).

    `end` is None when the delivery was dropped unrun (duplicate, stale,
    terminal job); then `report` is None too. `attempt` is the number that
    ran (or the message's number when dropped). Memory in bytes, time in
    seconds.
    """

    job_id: str
    attempt: int
    max_attempts: int = 0
    end: AttemptEnd | None = None
    report: AttemptReport | None = None
    duration_seconds: float = 0.0
    rss_before_bytes: int | None = None
    rss_after_bytes: int | None = None

    @property
    def status(self) -> str | None:
        """The job's status after this delivery, or None when it recorded nothing."""
        return self.end.status if self.end is not None else None


@dataclass(frozen=True)
class Delivery:
    """A message asking to run attempt `attempt` of job `job_id` in process `pid` on `hostname`.

    `rss_bytes` is the child's resident memory before the attempt; `resume`
    marks a retry of the same start after a lost connection (the first try
    may have committed).
    """

    job_id: uuid.UUID | str
    attempt: int
    hostname: str
    pid: int
    rss_bytes: int | None = None
    resume: bool = False


@dataclass(frozen=True)
class AttemptRef:
    """Attempt `number` of job `job_id`; `started` is what engine.start returned when this
    process ran it (the common case is then one statement); `rss_bytes` the child's
    resident memory after it."""

    job_id: uuid.UUID | str
    number: int
    started: StartedAttempt | None = None
    rss_bytes: int | None = None


@dataclass(frozen=True)
class Loss:
    """Child `worker_pid` (None: unknown) died running job `job_id`, whose message was
    published for attempt `attempt`; `message` is the error text stored."""

    job_id: uuid.UUID | str
    attempt: int
    worker_pid: int | None
    message: str


@dataclass(frozen=True)
class JobRef:
    """Job `job_id`, acted on by an operator or a caller (cancel, requeue, retry now)."""

    job_id: uuid.UUID | str


@dataclass(frozen=True)
class Sweep:
    """A scheduler pass: rows due at `now` (None: the database's now), at most `limit`,
    claimed for `claimer` (jobs.outbox_claim) where the pass publishes them."""

    now: datetime | None = None
    limit: int = 500
    claimer: str = ""


@dataclass(frozen=True)
class Moved:
    """A job after an operator's transition: `was` its status before, `due` its
    `next_attempt_at` before (retry now), `max_attempts_before` its attempt budget
    before, `reason` why it was dead (requeue)."""

    job: Job
    was: str
    due: datetime | None = None
    max_attempts_before: int = 0
    reason: str = ""


@dataclass
class Effects:
    """What an operation sends once its transaction commits (signals, then callables).

    Filled by the engine's backends, sent by the engine's boundary (jobs.engine),
    so every operation's events leave from one place.
    """

    events: list[tuple[Signal, dict[str, Any]]] = field(default_factory=list)
    calls: list[Callable[[], Any]] = field(default_factory=list)
    # Jobs whose live attempt the operation ended (or, on PostgreSQL's finish, whose limited
    # kind has a job waiting for a slot): their concurrency slot is handed off after commit.
    freed: list[Job] = field(default_factory=list)

    def send(self, signal: Signal, **kwargs: Any) -> None:
        """Send `signal` (sender Job) with `kwargs` after commit."""
        self.events.append((signal, kwargs))

    def call(self, fn: Callable[[], Any]) -> None:
        """Call `fn` after commit."""
        self.calls.append(fn)

    def slot_freed(self, job: Job) -> None:
        """`job` no longer holds a concurrency slot (its attempt ended, it was cancelled while
        running): the engine's boundary hands the slot to the oldest job waiting for it, if
        its kind has a limit (jobs.engine.limiting.hand_off)."""
        self.freed.append(job)
