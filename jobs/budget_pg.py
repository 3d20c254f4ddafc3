"""The retry budget in PostgreSQL (JOBS_STATE_STORE=postgres): jobs.budget's rule, one statement per decision.

Same windows, rule and answers as the Redis store (jobs.budget's
docstring); the decision is `jobs_retry_budget_reserve` (jobs.budget_sql), a
PL/pgSQL function judged by the database's `now()`, so one round trip.

First attempts (the budget's denominator) are not written one by one: each
process adds them up in memory per (kind, window) and writes them at most
every JOBS_RETRY_BUDGET_FLUSH_SECONDS, in one statement after the commit of
an attempt start, and always inside its next retry decision of that kind.
So a successful attempt costs no statement of its own; a process writes at
most one per FLUSH seconds. A count a process never wrote (it ended within
FLUSH seconds of a start and decided no retry) is missing from its window:
the budget is then stricter, never looser. docs/state-store.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

from django.conf import settings
from django.db import Error, connection, transaction

logger = logging.getLogger(__name__)

# {(kind, width, window index): first attempts not yet written}, per process.
_pending: Counter[tuple[str, float, int]] = Counter()
_lock = threading.Lock()
_last_flush = {"at": 0.0}


def record_first(kind: str, *, now: float, width: float) -> None:
    """Count a first attempt of `kind` started at `now` (epoch seconds, the database's clock), in memory.

    Writes the process's pending counts when JOBS_RETRY_BUDGET_FLUSH_SECONDS
    have passed since the last write (one statement). Never raises.
    """
    index = int(now // width)
    with _lock:
        _pending[(kind, width, index)] += 1
        due = time.monotonic() - _last_flush["at"] >= settings.JOBS_RETRY_BUDGET_FLUSH_SECONDS
    if due:
        flush()


def _take(kind: str | None = None, width: float | None = None) -> list[tuple[str, float, int, int]]:
    with _lock:
        keys = [key for key in _pending if kind is None or (key[0] == kind and key[1] == width)]
        taken = [(k, w, i, _pending.pop((k, w, i))) for k, w, i in keys]
        if kind is None:
            _last_flush["at"] = time.monotonic()
    return taken


def _give_back(taken: list[tuple[str, float, int, int]]) -> None:
    with _lock:
        for kind, width, index, n in taken:
            _pending[(kind, width, index)] += n


def flush() -> bool:
    """Write every pending first-attempt count (one statement per window length). Never raises.

    Returns False when the database refused (the counts stay pending).
    """
    taken = _take()
    if not taken:
        return True
    by_width: dict[float, list[tuple[str, int, int]]] = {}
    for kind, width, index, n in taken:
        by_width.setdefault(width, []).append((kind, index, n))
    try:
        with _statement(), connection.cursor() as cursor:
            for width, rows in by_width.items():
                cursor.execute(
                    "SELECT jobs_retry_budget_count_firsts(%s, %s, %s, %s)",
                    [width, [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]],
                )
    except Error as exc:  # any database error: DatabaseError, InterfaceError
        _give_back(taken)
        logger.debug("retry budget: first attempts not counted yet: %s", exc)
        return False
    return True


def _statement() -> transaction.Atomic | _NoBlock:
    # Inside a transaction a failed statement would abort it: give ours a savepoint.
    return transaction.atomic() if connection.in_atomic_block else _NoBlock()


class _NoBlock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def reserve(
    kind: str,
    *,
    due: float,
    width: float,
    ratio: float,
    floor: int,
    max_deferral: float,
    guard: float,
    spread: float,
    ttl: float,
    release: tuple[int, ...],
) -> tuple[bool, float, int, int, float] | None:
    """One decision (jobs.budget.reserve's contract): (granted, added seconds, exhausted, used, limit).

    This process's pending first attempts of `kind` are written in the same
    statement. None when the database did not answer (the caller falls back).
    """
    firsts = _take(kind, width)
    try:
        with _statement(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT * FROM jobs_retry_budget_reserve(%s, %s, %s, %s, %s, %s, %s, %s, %s,"
                " %s::bigint[], %s::bigint[], %s::integer[])",
                [
                    kind,
                    due,
                    width,
                    ratio,
                    floor,
                    due + max_deferral,
                    guard,
                    spread,
                    ttl,
                    list(release[:2]),
                    [f[2] for f in firsts],
                    [f[3] for f in firsts],
                ],
            )
            row = cursor.fetchone()
    except Error as exc:  # any database error: DatabaseError, InterfaceError
        _give_back(firsts)
        logger.debug("retry budget: no answer for %s, retry allowed: %s", kind, exc)
        return None
    granted, added, exhausted, used, limit = row
    return bool(granted), float(added), int(exhausted), int(used), float(limit)


def window_counts(
    kinds: list[str], *, width: float, ratio: float, floor: int
) -> dict[str, tuple[int, float]]:
    """{kind: (retries counted, limit)} in the window holding the database's now(); one statement.

    Raises django.db.Error.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT kind, firsts, retries FROM jobs_retrybudgetwindow WHERE kind = ANY(%s)"
            ' AND width = %s AND "index" = floor(extract(epoch FROM now()) / %s)::bigint',
            [kinds, width, width],
        )
        found = {kind: (firsts, retries) for kind, firsts, retries in cursor.fetchall()}
    return {
        kind: (found.get(kind, (0, 0))[1], ratio * found.get(kind, (0, 0))[0] + floor)
        for kind in kinds
    }
