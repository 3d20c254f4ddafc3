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

from jobs import fuse_rules, gcra

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
    memory limit not below the hard one when both are set; `concurrency` not
    a whole number >= 1 (or None); `concurrency_key` not a dotted path, or
    set without `concurrency`; a fuse field out of range (jobs.fuse_rules.check_fields);
    `rate` not like "20/s" or "600/m" (or None);
    `rate_key` not a dotted path or set without `rate`; `rate_burst` not a whole
    number >= 0.
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
    # At most `concurrency` live attempts of the kind across every worker and
    # host (None: no limit); with `concurrency_key`, a dotted payload path
    # ("account_id", "account.id"), at most that many per value of the key
    # (jobs.concurrency_gate; docs/flow-control.md).
    concurrency: int | None = None
    concurrency_key: str | None = None
    # The fuse (jobs.fuse_rules; docs/flow-control.md "Fuse"): off by default. On, attempts
    # stop starting while the window's share of dependency failures is at least
    # `fuse_failure_ratio` over `fuse_min_attempts` or more, for a cool-down (doubled
    # after a failed probe, at most `fuse_cooldown_max`). `fuse_key`: a dotted payload
    # path to a URL whose host names the destination (one fuse per host); None: one fuse
    # for the kind.
    fuse: bool = False
    fuse_key: str | None = None
    fuse_failure_ratio: float = 0.5
    fuse_min_attempts: int = 10
    fuse_window: float = 60.0
    fuse_window_attempts: int = 20
    fuse_cooldown: float = 30.0
    fuse_cooldown_max: float = 600.0
    # At most `rate` attempt starts ("20/s", "600/m") across every worker and host, plus
    # `rate_burst` at once after a quiet spell; with `rate_key` (a dotted payload path),
    # per value of the key (jobs.rate_gate, jobs.gcra; docs/flow-control.md).
    rate: str | None = None
    rate_key: str | None = None
    rate_burst: int = 0

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
        self._check_concurrency()
        fuse_rules.check_fields(
            fuse=self.fuse,
            fuse_key=self.fuse_key,
            failure_ratio=self.fuse_failure_ratio,
            min_attempts=self.fuse_min_attempts,
            window=self.fuse_window,
            cooldown=self.fuse_cooldown,
            cooldown_max=self.fuse_cooldown_max,
            window_attempts=self.fuse_window_attempts,
        )
        self._check_rate()
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

    def _check_concurrency(self) -> None:
        value, key = self.concurrency, self.concurrency_key
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ValueError(
                f"concurrency must be a whole number of at least 1 or null, not {value!r}"
            )
        _check_key(
            "concurrency_key", key, needs="a concurrency limit (concurrency: N)", limit=value
        )

    def _check_rate(self) -> None:
        if self.rate is not None:
            gcra.parse_rate(self.rate)
        burst = self.rate_burst
        if isinstance(burst, bool) or not isinstance(burst, int) or burst < 0:
            raise ValueError(f"rate_burst must be a whole number of at least 0, not {burst!r}")
        _check_key("rate_key", self.rate_key, needs="a rate (rate: '20/s')", limit=self.rate)

    @property
    def concurrency_path(self) -> tuple[str, ...]:
        """`concurrency_key` split at its dots (empty: one limit for the whole kind)."""
        return tuple(self.concurrency_key.split(".")) if self.concurrency_key else ()

    @property
    def rate_path(self) -> tuple[str, ...]:
        """`rate_key` split at its dots (empty: one bucket for the whole kind)."""
        return tuple(self.rate_key.split(".")) if self.rate_key else ()

    @property
    def rate_per_second(self) -> float | None:
        """`rate` as attempts per second, None without a rate."""
        return None if self.rate is None else gcra.parse_rate(self.rate)

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


def _check_key(name: str, key: Any, *, needs: str, limit: Any) -> None:
    """Raise ValueError unless `key` is None or a dotted payload path set beside its `limit`."""
    if key is None:
        return
    if not isinstance(key, str) or not all(part.strip() for part in key.split(".")):
        raise ValueError(f"{name} must be a dotted payload path like 'account_id', not {key!r}")
    if limit is None:
        raise ValueError(f"{name} {key!r} needs {needs}")
