"""Built-in job kinds. Importing this package registers them."""

from django.conf import settings

from jobs.kinds import csv_summary, faults, flaky, leaky, webhook  # noqa: F401
from jobs.kinds.base import (
    AttemptContext,
    Cancelled,
    Kind,
    PermanentError,
    RetryableError,
)
from jobs.kinds.registry import UnknownKind, get_kind, kind_names, policy_for, register

if settings.JOBS_FAULT_KINDS:
    for _fault_kind in (*faults.FAULT_KINDS, *leaky.LEAK_KINDS):
        register(_fault_kind)

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
