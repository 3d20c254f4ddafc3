"""First attempts counted in one process, waiting to be written to the retry budget together.

jobs.budget.record_first adds each first attempt here and, at the first
attempt that finds the oldest pending count `flush_after` seconds old
(JOBS_RETRY_BUDGET_FIRST_FLUSH_SECONDS), writes them all in one pipelined
round trip; a worker child's exit writes what is left. A child that goes
idle keeps what it counted in its last `flush_after` seconds until its
next first attempt or its exit. A count that waits is a first attempt the
budget has not seen yet: the limit is lower, never higher, so the budget
stays a guarantee (docs/profiles/p1-child-2026-12-04.md has the measurements).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class FirstTally:
    """Pending first-attempt counts of this process: {budget hash key: count}.

    `oldest` is the monotonic time (seconds) of the oldest pending count,
    None when nothing is pending; `pid` the process the counts belong to (a
    forked child starts with none of its parent's).
    """

    pending: Counter[str] = field(default_factory=Counter)
    oldest: float | None = None
    pid: int = field(default_factory=os.getpid)

    def add(self, key: str, *, at: float, flush_after: float) -> bool:
        """Count one first attempt under `key` at monotonic `at`; True when the counts are due."""
        self._forget_if_forked()
        self.pending[key] += 1
        if self.oldest is None:
            self.oldest = at
        return at - self.oldest >= flush_after

    def take(self) -> dict[str, int]:
        """The pending counts, now no longer pending (empty when none)."""
        self._forget_if_forked()
        counts = dict(self.pending)
        self.pending.clear()
        self.oldest = None
        return counts

    def _forget_if_forked(self) -> None:
        if self.pid != os.getpid():
            # The parent's counts are the parent's to write.
            self.pending.clear()
            self.oldest = None
            self.pid = os.getpid()
