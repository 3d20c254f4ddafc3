"""Garbage collection in a worker child: freeze what it inherited, collect after failed attempts."""

from __future__ import annotations

import gc

from jobs.models import AttemptOutcome
from observability.memory import rss_bytes

# Failed attempts (plain errors) between two full collections in a child.
FULL_COLLECTION_EVERY = 8
# RSS growth (bytes) since the last full collection after which the next failed attempt collects.
FULL_COLLECTION_RSS_GROWTH = 16 * 1024 * 1024
_failures_since_collection = [0]
_rss_at_collection: list[int | None] = [None]


def collect_after_failure(outcome: str, *, rss: int | None = None) -> int | None:
    """Run a full garbage collection after a failed attempt, every FULL_COLLECTION_EVERY errors.

    `rss` is the child's RSS now (bytes, None if unknown). Returns the RSS
    after: `rss` itself when nothing was collected, read again when it was
    (so the caller reads /proc once per failed attempt). A failed attempt
    leaves exception-info cycles (~155 KB measured on Celery 5.7); run_kind
    broke the attempt's own, but some become garbage only later (Celery's
    own exception info) and reach the oldest generation, which a young
    collection never frees: `manage.py jobs_storm` measured 38 MB of worker
    growth over 120 timed-out attempts with gc.collect(1), 1.5 MB with a
    full one. After freeze_inherited_objects() a full collection scans only
    what this child made since its fork, but in a retry storm one after
    every error was still 8.5% of a child's CPU (py-spy, `python -m bench
    storm --profile-storm`): it now runs after every FULL_COLLECTION_EVERY-th
    error (~1.2 MB of such garbage waits at most), at once after a timeout
    or a memory limit, whose interrupted frames may hold more, and at once
    when RSS grew by FULL_COLLECTION_RSS_GROWTH since the last one (an
    exception holding a large object must not wait for seven more).
    """
    _failures_since_collection[0] += 1
    baseline = _rss_at_collection[0]
    if baseline is None:
        _rss_at_collection[0] = baseline = rss
    grown = rss is not None and baseline is not None and rss - baseline > FULL_COLLECTION_RSS_GROWTH
    if (
        outcome == AttemptOutcome.ERROR
        and _failures_since_collection[0] < FULL_COLLECTION_EVERY
        and not grown
    ):
        return rss
    _failures_since_collection[0] = 0
    gc.collect()
    _rss_at_collection[0] = rss_bytes() if rss is not None else None
    return _rss_at_collection[0]


def freeze_inherited_objects() -> None:
    """Move every object this process holds now to the permanent generation (gc.freeze).

    Called in each worker child right after its fork (jobs.tasks): the
    imported modules, settings and app are never garbage, and a full
    collection (after each failed attempt) then scans only the objects the
    child made since. Python's gc docs recommend freezing around fork for
    the same reason (and to spare copy-on-write pages).
    """
    gc.freeze()
