"""Measures of a rate limit's starts, shared by the rate-limit integration and soak tests."""

from __future__ import annotations

import bisect
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.integration.harness import Platform


def start_times(platform: Platform, kind: str) -> list[float]:
    """Epoch seconds of every attempt start of `kind` (Attempt.started_at), sorted."""
    rows = platform.rows(
        "SELECT extract(epoch FROM a.started_at)::float8 FROM jobs_attempt a"
        " JOIN jobs_job j ON j.id = a.job_id WHERE j.kind = %s ORDER BY 1",
        (kind,),
    )
    return [float(row[0]) for row in rows]


def worst_window(times: Sequence[float], width: float = 1.0) -> int:
    """The most of the sorted `times` in any half-open window [t, t + width) (sliding: every
    window starting at one of them holds at least as many as any other)."""
    return max((bisect.bisect_left(times, t + width) - i for i, t in enumerate(times)), default=0)


def mean_rate(times: Sequence[float], *, burst: int = 0) -> float:
    """Starts per second from the first start to the last, the burst at the start left out."""
    if len(times) < burst + 2:
        return 0.0
    return (len(times) - 1 - burst) / (times[-1] - times[0])


def summary(times: Sequence[float], *, burst: int) -> str:
    """One line: starts, span, mean, the worst sliding second."""
    span = times[-1] - times[0] if times else 0.0
    return (
        f"{len(times)} starts over {span:.2f} s, mean {mean_rate(times, burst=burst):.2f}/s, "
        f"worst sliding 1-s window {worst_window(times)}; per second {per_second(times)}"
    )


def spread(values: Sequence[float]) -> str:
    """Percentiles of sorted `values` (seconds) in ms: min, p50, p90, p99, max."""
    if not values:
        return "none"
    marks = [values[0], *(values[int(q * (len(values) - 1))] for q in (0.5, 0.9, 0.99)), values[-1]]
    names = ("min", "p50", "p90", "p99", "max")
    return ", ".join(f"{name} {1000 * value:.1f}" for name, value in zip(names, marks, strict=True))


def per_second(times: Sequence[float]) -> list[int]:
    """Starts in each whole second after the first start."""
    if not times:
        return []
    counts = [0] * (int(times[-1] - times[0]) + 1)
    for t in times:
        counts[int(t - times[0])] += 1
    return counts


def submit_paced(
    platform: Platform, kind: str, payload: dict[str, Any], *, count: int, per_second: float
) -> list[str]:
    """Submit `count` jobs of `kind`, at most `per_second` (4 threads, each submission
    scheduled at its own time from the start); their ids."""
    began = time.monotonic()

    def one(n: int) -> str:
        delay = began + n / per_second - time.monotonic()
        if delay > 0:
            time.sleep(delay)  # pacing the producer, not synchronising with the platform
        return platform.submit(kind, payload)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(one, range(count)))
