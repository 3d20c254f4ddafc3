"""Garbage collection in a worker child: freeze what it inherited, collect after failed attempts.

Each child owns one ChildCollector (jobs.tasks makes it at the child's start and passes it to
jobs.runner.execute_attempt).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass

from jobs.models import AttemptOutcome
from observability.memory import rss_bytes

# Failed attempts (plain errors) between two full collections in a child.
FULL_COLLECTION_EVERY = 8
# RSS growth (bytes) since the last full collection after which the next failed attempt collects.
FULL_COLLECTION_RSS_GROWTH = 16 * 1024 * 1024


@dataclass
class ChildCollector:
    """When a worker child runs a full garbage collection after a failed attempt; one per child.

    `collect` and `read_rss` are gc.collect and the child's RSS reader
    (bytes); tests pass fakes. `failures_since_collection` and
    `rss_at_collection` are the child's state since its last full
    collection. Why and how often: docs/memory.md ("Collecting after failed
    attempts"); in short, every `every`-th plain error, at once after a time
    limit or memory limit, and at once when RSS grew by `rss_growth_bytes`.
    """

    every: int = FULL_COLLECTION_EVERY
    rss_growth_bytes: int = FULL_COLLECTION_RSS_GROWTH
    collect: Callable[[], object] = gc.collect
    read_rss: Callable[[], int | None] = rss_bytes
    failures_since_collection: int = 0
    rss_at_collection: int | None = None

    def after_failure(self, outcome: str, *, rss: int | None = None) -> int | None:
        """Count one failed attempt ending with `outcome`; collect fully when it is time.

        `rss` is the child's RSS now (bytes, None if unknown). Returns the
        RSS after: `rss` itself when nothing was collected, read again when
        it was (so the caller reads /proc once per failed attempt).
        """
        self.failures_since_collection += 1
        baseline = self.rss_at_collection
        if baseline is None:
            self.rss_at_collection = baseline = rss
        grown = rss is not None and baseline is not None and rss - baseline > self.rss_growth_bytes
        if (
            outcome == AttemptOutcome.ERROR
            and self.failures_since_collection < self.every
            and not grown
        ):
            return rss
        self.failures_since_collection = 0
        self.collect()
        self.rss_at_collection = self.read_rss() if rss is not None else None
        return self.rss_at_collection


def freeze_inherited_objects() -> None:
    """Move every object this process holds now to the permanent generation (gc.freeze).

    Called in each worker child right after its fork (jobs.tasks): the
    imported modules, settings and app are never garbage, and a full
    collection (after each failed attempt) then scans only the objects the
    child made since. Python's gc docs recommend freezing around fork for
    the same reason (and to spare copy-on-write pages).
    """
    gc.freeze()
