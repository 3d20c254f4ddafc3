"""Replace a worker child after an attempt that left its state suspect (docs/forking.md).

An exception raised into a kind's code by a signal handler (the supervisor's
AttemptAbort, Celery's SoftTimeLimitExceeded) lands wherever the code was;
what it held may stay held in the child. `retire_after_attempt` has the
child replaced once that attempt's result is sent, through billiard's
after-task memory check (EX_RECYCLE), whose reading jobs.memory_startup
provides: a marked child reads just over the limit once. A pool without a
per-child limit gets UNREACHABLE_KIB so the check runs (`keep_check_on`).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from billiard.process import current_process
from celery import signals

from jobs.reasons import RecycleReason

logger = logging.getLogger(__name__)

# billiard's per-child limit (KiB) when the worker has none: ~1 EiB.
UNREACHABLE_KIB = 2**50

_pending: dict[str, RecycleReason | None] = {"reason": None}


def child_label() -> str:
    """This pool child's index as a label ("0".."concurrency-1"; a replacement keeps it), or "main"."""
    # billiard sets `index` on each pool process (billiard/pool.py _create_worker_process).
    index = getattr(current_process(), "index", None)
    return "main" if index is None else str(index)


def retire_after_attempt(*, reason: RecycleReason, why: str) -> None:
    """Have this child replaced once its current attempt's result is sent; `why` goes to the log."""
    if _pending["reason"] is None:
        logger.warning(
            "worker child pid %s (index %s) is replaced after this attempt: %s",
            os.getpid(),
            child_label(),
            why,
        )
    _pending["reason"] = reason


def take_pending() -> RecycleReason | None:
    """The reason this child retires now, or None; called by billiard's after-task check."""
    reason, _pending["reason"] = _pending["reason"], None
    return reason


def limit_shown_kib(pool_limit_kib: int | None) -> int:
    """The per-child memory limit as the operator set it (0: none), from the pool's value."""
    return 0 if not pool_limit_kib or pool_limit_kib >= UNREACHABLE_KIB else int(pool_limit_kib)


@signals.worker_init.connect
def keep_check_on(sender: Any = None, **_: Any) -> None:
    # Before the pool is built (worker_init precedes the bootsteps): billiard
    # runs its after-task check only when the pool has a per-child limit.
    if sender is not None and not getattr(sender, "max_memory_per_child", None):
        sender.max_memory_per_child = UNREACHABLE_KIB
