"""Rate limits: the rate text of a policy and the GCRA arithmetic (docs/flow-control.md).

GCRA, the generic cell rate algorithm in its virtual-scheduling form (ITU-T
I.371): a bucket keeps one number, its theoretical arrival time `tat`. With
emission interval T = 1/rate and tolerance tau = burst x T, an arrival at `at`
conforms when max(tat, at) - tau <= at; it then moves `tat` to
max(tat, at) + T. Conforming arrivals in any half-open window of W seconds
number at most W x rate + burst (for a whole W x rate), whatever order they
are judged in. This module imports nothing of the project: the policy, the
ORM path and the tests use it; PostgreSQL runs the same formula in
jobs_rate_admit (jobs.rate_sql).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# "20/s", "600/m", "2.5/s": a positive number of attempts per second or minute.
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(s|m)\s*$")
_UNIT_SECONDS = {"s": 1.0, "m": 60.0}


def parse_rate(text: str) -> float:
    """Attempts per second of a policy's `rate` ("20/s", "600/m"); raises ValueError for
    anything else (not a string, no unit, zero or negative)."""
    match = _RATE.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"rate must look like '20/s' or '600/m', not {text!r}")
    per_second = float(match.group(1)) / _UNIT_SECONDS[match.group(2)]
    if per_second <= 0:
        raise ValueError(f"rate must be above zero, not {text!r}")
    return per_second


def period_of(text: str) -> float:
    """The period of a valid rate text in seconds: 1 for "20/s", 60 for "600/m"."""
    match = _RATE.match(text)
    if match is None:
        raise ValueError(f"rate must look like '20/s' or '600/m', not {text!r}")
    return _UNIT_SECONDS[match.group(2)]


def interval_of(*, per_second: float, period: float, margin: float) -> float:
    """GCRA's emission interval T (seconds) for `per_second` over `period` seconds, with
    `margin` seconds of dispatch jitter allowed for: the rate x period + 1 starts that the
    plain T = 1/rate fits in a closed period then span period + margin, so a destination
    seeing them up to `margin` s apart from one another still counts at most rate x period
    (+ burst) in any window of one period."""
    return (period + margin) / (per_second * period)


@dataclass(frozen=True)
class Verdict:
    """One GCRA judgement: `admitted`; the bucket's `tat` after it (unchanged when refused);
    `wait`, seconds until the arrival would conform (0 when admitted)."""

    admitted: bool
    tat: float
    wait: float


def judge(*, tat: float | None, at: float, per_second: float, burst: int) -> Verdict:
    """Judge an arrival at `at` (epoch seconds) on a bucket whose theoretical arrival time is
    `tat` (None: a new bucket) for `per_second` with `burst` extra arrivals tolerated."""
    interval = 1.0 / per_second
    base = at if tat is None else max(tat, at)
    earliest = base - burst * interval
    if earliest > at:
        return Verdict(False, base if tat is not None else at, earliest - at)
    return Verdict(True, base + interval, 0.0)


def next_slot(
    *, tat: float | None, plan: float | None, at: float, per_second: float, burst: int
) -> float:
    """The start time reserved for a job held at `at`: the first time the bucket conforms,
    and not before the planning cursor `plan` (the slot after the last one reserved)."""
    conform = at if tat is None else max(at, tat - burst / per_second)
    return conform if plan is None else max(conform, plan)
