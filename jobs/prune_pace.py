"""How a prune shares the machine with live work: a duty cycle and batches bounded in time.

Pure arithmetic, no database: `jobs.retention.prune` asks `Pace.pause_after`
how long to rest after each batch and `Pace.next_size` how many jobs the next
one takes. The rule (docs/retention.md):

- **Duty cycle.** After a batch that took `t` seconds the prune rests
  `t * (1 - duty) / duty` (at least `min_pause`), so it holds its database
  connection, and the server backend's CPU, WAL and locks behind it, for at
  most `duty` of the wall time. A loaded server makes batches slower, and so
  the rests longer: the prune backs off by itself, without a tuned constant.
- **Batches bounded in time.** The next batch's size is scaled by
  `target / t`, at most doubling and at least quartering per step, within
  1..`max_batch`: a batch lasts about `target_seconds` whatever the machine's
  speed, so no single transaction holds its locks and its share of a core
  for long.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Limits on the settings (jobs.E040 refuses values outside them).
MIN_DUTY, MAX_DUTY = 0.01, 1.0
MIN_TARGET_MS, MAX_TARGET_MS = 10, 10_000
# The first batch of a run: small, since nothing is known yet about the machine.
FIRST_BATCH = 50
# A step changes the size by at most this factor up, and its inverse squared down.
GROWTH = 2.0


@dataclass(frozen=True)
class Pace:
    """A prune's pacing: `duty` (0..1] of wall time in batches, batches of about `target_seconds`.

    `max_batch` bounds a batch's jobs whatever its speed; `min_pause` is the
    least rest between batches (seconds).
    """

    duty: float = 0.4
    target_seconds: float = 0.1
    max_batch: int = 500
    min_pause: float = 0.0

    def __post_init__(self) -> None:
        if not MIN_DUTY <= self.duty <= MAX_DUTY:
            raise ValueError(f"duty is {self.duty}; it must be {MIN_DUTY:g}..{MAX_DUTY:g}")
        if self.target_seconds <= 0 or self.max_batch < 1 or self.min_pause < 0:
            raise ValueError("target_seconds > 0, max_batch >= 1 and min_pause >= 0 are required")

    def first_size(self) -> int:
        """Jobs in a run's first batch."""
        return min(self.max_batch, FIRST_BATCH)

    def pause_after(self, took: float) -> float:
        """Seconds to rest after a batch that took `took` seconds (the duty cycle)."""
        return max(self.min_pause, max(took, 0.0) * (1.0 - self.duty) / self.duty)

    def next_size(self, size: int, took: float) -> int:
        """Jobs in the batch after one of `size` jobs that took `took` seconds."""
        if took <= 0:
            factor = GROWTH
        else:
            factor = min(GROWTH, max(1 / GROWTH**2, self.target_seconds / took))
        return max(1, min(self.max_batch, math.floor(size * factor)))
