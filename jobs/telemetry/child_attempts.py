"""Attempts by worker child: one child whose attempts time out while others succeed.

Each child counts the attempts it records in
jobs_worker_child_attempts_total{hostname, child, kind, outcome}, `child`
being its pool index, which a replacement takes over: as many series as the
pool has places, no cleanup when children are replaced (a pid label would
grow with every recycle). An attempt ended by a time limit also logs one
warning naming the child (pid, index, node) and its record for the kind.
"""

from __future__ import annotations

import logging
import os

from jobs.child_retire import child_label
from jobs.models import AttemptOutcome
from observability import metrics as m

logger = logging.getLogger(__name__)

# Outcomes a child records itself (hard_timeout and worker_lost are the main process's).
CHILD_OUTCOMES = tuple(
    o for o in AttemptOutcome if o not in (AttemptOutcome.HARD_TIMEOUT, AttemptOutcome.WORKER_LOST)
)
TIME_LIMITED = frozenset({AttemptOutcome.SOFT_TIMEOUT})

# This child's attempts since it started: {kind: [ended by a time limit, all]}.
_record: dict[str, list[int]] = {}


def initialize(*, hostname: str, kinds: list[str]) -> None:
    """Create this child's series at 0 (at child start; its place may be new)."""
    _record.clear()
    for kind in kinds:
        for outcome in CHILD_OUTCOMES:
            m.jobs_worker_child_attempts_total.labels(hostname, child_label(), kind, outcome)


def observe(
    *, hostname: str, node: str, kind: str, outcome: str, job_id: object, attempt: int
) -> None:
    """Count one attempt this child ended; log a time limit with the child's name and record.

    `hostname` is the label (celery-exporter's host part), `node` the worker's node name.
    """
    m.jobs_worker_child_attempts_total.labels(hostname, child_label(), kind, outcome).inc()
    limited, total = _record.setdefault(kind, [0, 0])
    limited += outcome in TIME_LIMITED
    _record[kind] = [limited, total + 1]
    if outcome in TIME_LIMITED:
        logger.warning(
            "time limit in worker child pid %s (index %s, %s): job_id=%s kind=%s attempt=%s %s;"
            " this child ended %s of its %s attempts of %s by a time limit",
            os.getpid(),
            child_label(),
            node,
            job_id,
            kind,
            attempt,
            outcome,
            limited,
            total + 1,
            kind,
        )
