"""Replace a worker child after an attempt that left its state suspect.

An exception injected into a kind's code (the supervisor's AttemptAbort, the
escalation of a soft time limit or a cancellation the code ignored; Celery's
SoftTimeLimitExceeded) lands wherever that code was: inside an import, a
connection pool's checkout, a half-written socket. What it held may stay
held or half-changed in the child, and every later attempt there can hang
on it (issue 19: each HTTP attempt of one child ran into its soft limit).
Celery replaces a child after a hard limit for this reason; here a child
whose attempt was interrupted so is replaced right after that attempt, its
outcome recorded and its result delivered like any other.

The exit path is billiard's after-task memory check (billiard/pool.py
Worker.workloop: after the result is sent, `mem_rss()` is compared with the
per-child limit and the child ends with EX_RECYCLE when over), whose
reading jobs.memory_startup already provides: a child marked here reads
over the limit once. The check runs only with a limit, so a worker without
one gets UNREACHABLE_KIB, which no child reaches (`keep_check_on`).
Counted as jobs_worker_children_recycled_total{reason="aborted"}.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from billiard.process import current_process
from celery import signals

from jobs.events import RecycleReason

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
