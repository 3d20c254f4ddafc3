"""Figures of `python -m bench`: table rows, verdicts against targets, the report, and how runs interleave."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


@dataclass
class Row:
    """One line of the table: a benchmark's variant, its samples and the baseline it is judged by."""

    bench: str
    variant: str
    unit: str
    samples: list[float]
    baseline: str = ""
    higher_is_better: bool = True

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else float("nan")


@dataclass
class Verdict:
    """One acceptance line: `ratio` against `limit` (`ratio >= limit` passes when `at_least`)."""

    target: str
    ratio: float
    limit: float
    at_least: bool
    detail: str = ""
    # A band: `low <= ratio <= limit` (with at_least False).
    low: float | None = None

    @property
    def passed(self) -> bool:
        if self.ratio != self.ratio:  # NaN: not measured
            return False
        if self.low is not None and self.ratio < self.low:
            return False
        return self.ratio >= self.limit if self.at_least else self.ratio <= self.limit

    def line(self) -> str:
        op = "≥" if self.at_least else "≤"
        if self.low is not None:
            op = f"{self.low:g} …"
        word = "PASS" if self.passed else "MISS"
        extra = f" ({self.detail})" if self.detail else ""
        return f"{word}  {self.target}: {self.ratio:.2f} (target {op} {self.limit:g}){extra}"


@dataclass
class Report:
    """Everything one invocation measured, in order."""

    rows: list[Row] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        return row

    def median(self, bench: str, variant: str) -> float:
        for row in self.rows:
            if row.bench == bench and row.variant == variant:
                return row.median
        return float("nan")

    def fastest(self, bench: str, variant: str) -> float:
        """The row's smallest sample (NaN when absent): a timing's cost without the noise."""
        for row in self.rows:
            if row.bench == bench and row.variant == variant and row.samples:
                return min(row.samples)
        return float("nan")

    def table(self) -> str:
        """Markdown table: median, min, max, and the ratio of medians to the row's baseline."""
        lines = [
            "| bench | variant | unit | median | min | max | n | ratio | vs |",
            "|---|---|---|---:|---:|---:|---:|---:|---|",
        ]
        for row in self.rows:
            base = self.median(row.bench, row.baseline) if row.baseline else float("nan")
            ratio = row.median / base if base and base == base else float("nan")
            lo, hi = (min(row.samples), max(row.samples)) if row.samples else (0.0, 0.0)
            lines.append(
                f"| {row.bench} | {row.variant} | {row.unit} | {fmt(row.median)} | {fmt(lo)} "
                f"| {fmt(hi)} | {len(row.samples)} | {fmt(ratio, 2) if ratio == ratio else ''} "
                f"| {row.baseline} |"
            )
        return "\n".join(lines)


def fmt(value: float, digits: int | None = None) -> str:
    """A figure with as many decimals as it deserves."""
    if value != value:
        return "nan"
    if digits is not None:
        return f"{value:.{digits}f}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, NaN when the denominator is 0 or NaN."""
    if not denominator or denominator != denominator:
        return float("nan")
    return numerator / denominator


def percentile(samples: list[float], q: float) -> float:
    """The q-th percentile (0..100) of `samples`, nearest rank; NaN when empty."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[index]


def interleave(
    runs: int,
    steps: Iterable[tuple[str, Callable[[], float]]],
    *,
    fewer: dict[str, int] | None = None,
) -> dict[str, list[float]]:
    """Run each (name, measure) in turn, `runs` times (A B A B ...); {name: samples}.

    `fewer` gives some steps fewer runs (they join the first rounds only).
    Each run's line gives its wall time too (set-up included), for `make bench`'s budget.
    """
    pairs = list(steps)
    limits = fewer or {}
    samples: dict[str, list[float]] = {name: [] for name, _ in pairs}
    for n in range(runs):
        for name, measure in pairs:
            own = min(runs, limits.get(name, runs))
            if n >= own:
                continue
            began = time.monotonic()
            value = measure()
            samples[name].append(value)
            took = time.monotonic() - began
            print(f"  run {n + 1}/{own} {name}: {fmt(value)} ({took:.0f} s)", flush=True)
    return samples
