"""Per-kind limits and retry policy, and the backoff formula.

Backoff is "full jitter" with a floor (AWS Architecture Blog, "Exponential
Backoff and Jitter", 2015): the n-th retry waits a uniform random time in
[floor, min(cap, base * 2**(n-1))] seconds.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class Policy:
    """Limits and retry rules of one kind. Times are seconds.

    Raises ValueError on construction when a rule is inconsistent (hard limit
    not above soft, no attempts, negative times).
    """

    max_attempts: int = 5
    soft_time_limit: float = 30.0
    hard_time_limit: float = 45.0
    backoff_base: float = 1.0
    backoff_cap: float = 300.0
    backoff_floor: float = 0.5
    # Retry exceptions the kind did not classify (anything but PermanentError).
    retry_unexpected_errors: bool = True

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.soft_time_limit <= 0 or self.hard_time_limit <= self.soft_time_limit:
            raise ValueError("time limits need 0 < soft_time_limit < hard_time_limit")
        if min(self.backoff_base, self.backoff_cap, self.backoff_floor) < 0:
            raise ValueError("backoff times must not be negative")

    def with_overrides(self, overrides: dict[str, Any]) -> Policy:
        """Return a copy with the named fields replaced.

        Raises ValueError for an unknown field name or an inconsistent result.
        """
        known = {f.name for f in fields(self)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(f"unknown policy fields: {sorted(unknown)}")
        return replace(self, **overrides)

    def backoff_bounds(self, failed_attempt: int) -> tuple[float, float]:
        """(low, high) seconds of the delay after attempt `failed_attempt` (1-based)."""
        exponent = max(failed_attempt - 1, 0)
        # Exponents past ~60 overflow nothing in Python, but stop early anyway.
        ceiling = (
            self.backoff_cap
            if exponent > 60
            else min(self.backoff_cap, self.backoff_base * 2**exponent)
        )
        high = max(ceiling, self.backoff_floor)
        return self.backoff_floor, high

    def backoff_delay(self, failed_attempt: int, *, rng: random.Random | None = None) -> float:
        """Seconds to wait after attempt `failed_attempt` fails: uniform in backoff_bounds."""
        low, high = self.backoff_bounds(failed_attempt)
        return (rng or random).uniform(low, high)

    def retry_delay(
        self,
        failed_attempt: int,
        *,
        retry_after: float | None = None,
        rng: random.Random | None = None,
    ) -> float:
        """Backoff delay, raised to the server's `Retry-After` (seconds) when it asks for more."""
        delay = self.backoff_delay(failed_attempt, rng=rng)
        if retry_after is not None:
            delay = max(delay, retry_after)
        return delay
