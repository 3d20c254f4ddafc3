"""Job kinds: the base class, the registry. The built-in kinds register in jobs.kinds.builtin
(imported by JobsConfig.ready), so importing this package pulls in no kind's dependencies.
"""

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
