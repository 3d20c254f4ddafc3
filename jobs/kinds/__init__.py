"""Built-in job kinds. Importing this package registers them."""

from django.conf import settings

from jobs.kinds import (  # noqa: F401
    bulk,
    csv_summary,
    faults,
    flaky,
    leaky,
    memory_hog,
    storm,
    webhook,
)
from jobs.kinds.base import (
    AttemptContext,
    Cancelled,
    Kind,
    PermanentError,
    RetryableError,
)
from jobs.kinds.registry import UnknownKind, get_kind, kind_names, policy_for, register

if settings.JOBS_FAULT_KINDS:
    for _fault_kind in (
        *flaky.DEMO_KINDS,
        *faults.FAULT_KINDS,
        *leaky.LEAK_KINDS,
        *memory_hog.MEMORY_KINDS,
        *storm.STORM_KINDS,
    ):
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
