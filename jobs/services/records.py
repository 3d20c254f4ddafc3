"""Value types that services take and return: re-exported from jobs.engine.values."""

from jobs.engine.values import (
    RETRYABLE_OUTCOMES,
    AttemptEnd,
    AttemptReport,
    AttemptRun,
    StartedAttempt,
    SubmitResult,
    without_nul,
)

__all__ = [
    "RETRYABLE_OUTCOMES",
    "AttemptEnd",
    "AttemptReport",
    "AttemptRun",
    "StartedAttempt",
    "SubmitResult",
    "without_nul",
]
