"""Built-in job kinds. Importing this package registers them."""

from jobs.kinds import csv_summary, flaky, webhook  # noqa: F401
from jobs.kinds.base import (
    AttemptContext,
    Cancelled,
    Kind,
    PermanentError,
    RetryableError,
)
from jobs.kinds.registry import UnknownKind, get_kind, kind_names, policy_for, register

__all__ = [
    "AttemptContext",
    "Cancelled",
    "Kind",
    "PermanentError",
    "RetryableError",
    "UnknownKind",
    "get_kind",
    "kind_names",
    "policy_for",
    "register",
]
