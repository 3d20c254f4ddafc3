"""Per-kind limits and retry policy, and the backoff formula.

Backoff is "full jitter" with a floor (AWS Architecture Blog, "Exponential
Backoff and Jitter", 2015): the n-th retry waits a uniform random time in
[floor, min(cap, base * 2**(n-1))] seconds.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, fields, replace
from typing import Any

_TIMES = (
    "soft_time_limit",
    "hard_time_limit",
    "backoff_base",
    "backoff_cap",
    "backoff_floor",
)


@dataclass(frozen=True)
class Policy:
    """Limits and retry rules of one kind. Times are seconds.

    Raises ValueError on construction, with a message naming the fields
    and values, when the rules contradict each other or cannot be applied:
    `max_attempts` not an integer of at least 1; a time that is not a
    finite number (a bool, a string, NaN, infinity); a time limit not above
    zero or a hard limit not above the soft one; a negative backoff time;
    `backoff_floor` above `backoff_cap` (no delay could respect both);
    `retry_unexpected_errors` or `retry_memory_limit` not a bool; a memory
    limit that is not a whole number of bytes >= 0 (or None), or a soft
    memory limit not below the hard one when both are set.
    """

    max_attempts: int = 5
    soft_time_limit: float = 30.0
    hard_time_limit: float = 45.0
    backoff_base: float = 1.0
    backoff_cap: float = 300.0
    backoff_floor: float = 0.5
    # Retry exceptions the kind did not classify (anything but PermanentError).
    retry_unexpected_errors: bool = True
    # Memory an attempt may make its child own, in bytes (jobs.memory_guard):
    # past the soft limit its cancellation flag is set, past the hard one it
    # ends `memory_limit`. None: the global default (JOBS_MEMORY_*_LIMIT_BYTES);
    # 0: no limit.
    soft_memory_limit: int | None = None
    hard_memory_limit: int | None = None
    # An attempt stopped for memory is not retried by default: the same
    # input would most likely need the same memory again (jobs.decisions).
    retry_memory_limit: bool = False

    def __post_init__(self) -> None:
        # Types first: overrides come from JSON (JOBS_KIND_OVERRIDES), where
        # "3", true and NaN parse fine and compare wrongly or not at all.
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise ValueError(f"max_attempts must be an integer, not {self.max_attempts!r}")
        for name in _TIMES:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{name} must be a number of seconds, not {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number of seconds, not {value!r}")
        for flag in ("retry_unexpected_errors", "retry_memory_limit"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{flag} must be true or false, not {getattr(self, flag)!r}")
        for name in ("soft_memory_limit", "hard_memory_limit"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise ValueError(
                    f"{name} must be a whole number of bytes (0: no limit) or null, not {value!r}"
                )
        soft, hard = self.soft_memory_limit, self.hard_memory_limit
        if soft and hard and soft >= hard:
            raise ValueError(
                "memory limits need soft_memory_limit < hard_memory_limit, got "
                f"soft_memory_limit {soft} bytes, hard_memory_limit {hard} bytes"
            )
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, not {self.max_attempts}")
        if self.soft_time_limit <= 0 or self.hard_time_limit <= self.soft_time_limit:
            raise ValueError(
                "time limits need 0 < soft_time_limit < hard_time_limit, got "
                f"soft_time_limit {self.soft_time_limit} s, hard_time_limit {self.hard_time_limit} s"
            )
        if min(self.backoff_base, self.backoff_cap, self.backoff_floor) < 0:
            raise ValueError(
                "backoff times must not be negative, got backoff_base "
                f"{self.backoff_base} s, backoff_cap {self.backoff_cap} s, "
                f"backoff_floor {self.backoff_floor} s"
            )
        if self.backoff_floor > self.backoff_cap:
            raise ValueError(
                f"backoff_floor {self.backoff_floor} s is above backoff_cap {self.backoff_cap} s: "
                "no retry delay can be at least the floor and at most the cap"
            )

    def with_overrides(self, overrides: dict[str, Any]) -> Policy:
        """Return a copy with the named fields replaced.

        Raises ValueError for an unknown field name or an inconsistent or
        mistyped result (see the class docstring).
        """
        if not isinstance(overrides, dict):
            raise ValueError(
                f"overrides must be an object of policy fields, not {type(overrides).__name__}"
            )
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
