"""Value types that services take and return.

An attempt ending with one of RETRYABLE_OUTCOMES may be retried, policy permitting.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from jobs.models import AttemptOutcome, Job
from jobs.policy import Policy

RETRYABLE_OUTCOMES = frozenset(
    {
        AttemptOutcome.ERROR,
        AttemptOutcome.SOFT_TIMEOUT,
        AttemptOutcome.HARD_TIMEOUT,
        AttemptOutcome.WORKER_LOST,
    }
)


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
