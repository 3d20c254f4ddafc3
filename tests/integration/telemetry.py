"""Helpers of the telemetry tests: read real scrapes like `registry.get_sample_value`.

A scrape is parsed with prometheus_client's own text parser into `Samples`,
whose `get(name, labels)` answers exactly as
`CollectorRegistry.get_sample_value` does (None when the series is absent).
Counters of one platform live on three endpoints (the web's /metrics, the
worker's — main process and children — and the scheduler's, which also
carries celery_worker_up), so `scrape_platform` sums them per series, as a
Prometheus `sum()` would.

`covers(*names)` marks a test as exercising catalogue entries; the meta-test
in test_telemetry_catalogue.py reads these marks from every
test_telemetry*.py file and fails when an entry of observability.metrics is
not covered.
"""

from __future__ import annotations

import ast
import json
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psutil
import requests
from prometheus_client.metrics import Counter, Gauge, Histogram, MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from devstack.services import wait_for
from tests.integration.harness import (
    HTTP_TIMEOUT,
    TERMINAL,
    Platform,
    PlatformFactory,
    require_postgres,
)

Key = tuple[str, tuple[tuple[str, str], ...]]
F = TypeVar("F", bound=Callable[..., Any])


def labels_key(labels: dict[str, str] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((labels or {}).items()))


@dataclass
class Samples:
    """Every sample of one (or several summed) scrapes, keyed by (sample name, labels)."""

    values: dict[Key, float] = field(default_factory=dict)
    seconds: float = 0.0  # how long the scrape took

    @classmethod
    def parse(cls, text: str, *, seconds: float = 0.0) -> Samples:
        samples = cls(seconds=seconds)
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                key = (sample.name, labels_key(sample.labels))
                samples.values[key] = samples.values.get(key, 0.0) + sample.value
        return samples

    def get(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        """Like CollectorRegistry.get_sample_value: the value, or None when absent."""
        return self.values.get((name, labels_key(labels)))

    def series(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        """{labels: value} of every series of sample `name`."""
        return {labels: v for (n, labels), v in self.values.items() if n == name}

    def total(self, name: str, **match: str) -> float:
        """Sum of sample `name` over the series whose labels include `match`."""
        return sum(
            v
            for labels, v in self.series(name).items()
            if all(dict(labels).get(k) == want for k, want in match.items())
        )

    def names(self) -> set[str]:
        return {name for name, _ in self.values}

    def __add__(self, other: Samples) -> Samples:
        merged = Samples(values=dict(self.values), seconds=self.seconds + other.seconds)
        for key, value in other.values.items():
            merged.values[key] = merged.values.get(key, 0.0) + value
        return merged


def scrape(url: str) -> Samples:
    """GET `url` (a /metrics) and parse it; raises for a non-200 answer."""
    started = time.perf_counter()
    response = requests.get(url, timeout=HTTP_TIMEOUT)
    seconds = time.perf_counter() - started
    response.raise_for_status()
    return Samples.parse(response.text, seconds=seconds)


def scrape_platform(platform: Platform) -> Samples:
    """Web, worker and (when it runs) scheduler /metrics of `platform`, summed per series."""
    samples = scrape(platform.url("/metrics")) + scrape(platform.worker_metrics_url)
    if platform.scheduler is not None:
        samples = samples + scrape(platform.scheduler_metrics_url)
    return samples


def changes(before: Samples, after: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """{labels: after - before} of sample `name`, for the series that changed."""
    keys = set(before.series(name)) | set(after.series(name))
    out = {}
    for labels in keys:
        delta = after.values.get((name, labels), 0.0) - before.values.get((name, labels), 0.0)
        if delta:
            out[labels] = round(delta, 9)
    return out


def moved(
    before: Samples, after: Samples, names: Iterable[str]
) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """{name: changes} for every name in `names` that changed at all."""
    return {name: c for name in names if (c := changes(before, after, name))}


def counter_keys(samples: Samples) -> dict[Key, float]:
    """The monotonic part of a scrape: counters and histogram samples (no gauges)."""
    return {
        key: value
        for key, value in samples.values.items()
        if key[0].endswith(("_total", "_count", "_sum", "_bucket"))
    }


def settled(platform: Platform, *, timeout: float = 30) -> Samples:
    """Scrape until two scrapes 0.3 s apart agree on every counter; return the last.

    Events are counted just after their transaction commits, in whichever
    process committed; this waits out the stragglers, so a test that
    compares before/after sees every increment the action caused (and any
    extra one).
    """
    last: list[Samples] = [scrape_platform(platform)]

    def stable() -> Samples | None:
        current = scrape_platform(platform)
        same = counter_keys(current) == counter_keys(last[0])
        last[0] = current
        return current if same else None

    return wait_for(stable, timeout=timeout, interval=0.3, what="counters to settle")


def wait_metric(
    platform: Platform,
    predicate: Callable[[Samples], bool],
    *,
    timeout: float,
    what: str,
    url: str | None = None,
) -> Samples:
    """Scrape (the platform, or `url`) until `predicate(samples)` holds; return those samples."""

    def check() -> Samples | None:
        samples = scrape(url) if url else scrape_platform(platform)
        return samples if predicate(samples) else None

    try:
        return wait_for(check, timeout=timeout, interval=0.2, what=what)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{platform.log_tails()}") from None


def lbl(**labels: str) -> tuple[tuple[str, str], ...]:
    """A labels key for comparing with `changes()` output."""
    return labels_key(labels)


# --- the catalogue and what covers it ------------------------------------------

TELEMETRY_TESTS = Path(__file__).parent


def catalogue() -> dict[str, str]:
    """{exposition name: type} of every entry of observability.metrics.

    Counters are exposed with `_total`; histograms and gauges under their
    name; SCRAPE_TIME_SERIES by their key.
    """
    from observability import metrics  # noqa: PLC0415 - the catalogue registers its metrics in this process only when read

    names: dict[str, str] = {}
    for value in vars(metrics).values():
        if not isinstance(value, MetricWrapperBase):
            continue
        if isinstance(value, Counter):
            names[f"{value._name}_total"] = "counter"
        elif isinstance(value, Histogram):
            names[value._name] = "histogram"
        elif isinstance(value, Gauge):
            names[value._name] = "gauge"
        else:
            names[value._name] = type(value).__name__.lower()
    for name, (kind, _, _) in metrics.SCRAPE_TIME_SERIES.items():
        names[name] = kind
    return names


def covers(*names: str) -> Callable[[F], F]:
    """Mark a test as exercising the catalogue entries `names` (read back by AST, see below)."""

    def mark(function: F) -> F:
        function.covers = names  # type: ignore[attr-defined]
        return function

    return mark


def covered_names() -> dict[str, list[str]]:
    """{catalogue name: [test ids]} from every `@covers(...)` in test_telemetry*.py files."""
    found: dict[str, list[str]] = {}
    for path in sorted(TELEMETRY_TESTS.glob("test_telemetry*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_"):
                continue
            for decorator in node.decorator_list:
                if (
                    isinstance(decorator, ast.Call)
                    and isinstance(decorator.func, ast.Name)
                    and decorator.func.id == "covers"
                ):
                    for arg in decorator.args:
                        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                            found.setdefault(arg.value, []).append(f"{path.name}::{node.name}")
    return found


# --- the platform the catalogue tests share, and their assertions -----------------------

HOST = socket.gethostname()  # host_of("worker-…@<host>"), as celery-exporter labels it
TASK = {"name": "jobs.run_attempt", "hostname": HOST, "queue_name": "default"}
FLAKY = {"kind": "demo.flaky", "queue": "default"}
MAX_MEMORY_BYTES = 400 * 1024 * 1024
POLICIES = {
    # fast retries, three attempts at most
    "demo.flaky": {
        "max_attempts": 3,
        "backoff_base": 0.2,
        "backoff_floor": 0.1,
        "backoff_cap": 0.5,
    },
    # a soft limit of 1 s, a hard one of 3 s, no retry
    "demo.sleep": {"max_attempts": 1, "soft_time_limit": 1, "hard_time_limit": 3},
}


def catalogue_platform(logroot: Path, name: str) -> Iterator[Platform]:
    """A platform for a catalogue test module (use as a module-scoped fixture's body).

    Queues default and tiny (tiny takes no job: every submission to it gets
    503), POLICIES for demo.flaky and demo.sleep, MAX_MEMORY_BYTES per child.
    """
    require_postgres()
    factory = PlatformFactory(logroot=logroot)
    try:
        yield factory(
            name,
            env={
                "JOBS_KIND_OVERRIDES": json.dumps(POLICIES),
                "JOBS_QUEUES": "default,tiny",
                "JOBS_QUEUE_MAX_READY_OVERRIDES": "tiny=0",
                "JOBS_WORKER_MAX_MEMORY_PER_CHILD_BYTES": str(MAX_MEMORY_BYTES),
            },
        )
    finally:
        factory.close()


def monotonic_names() -> list[str]:
    """Sample names of the catalogue's counters and histograms (histograms by their _count)."""
    return sorted(
        name if kind == "counter" else f"{name}_count"
        for name, kind in catalogue().items()
        if kind in ("counter", "histogram")
    )


def assert_moved_exactly(before: Samples, after: Samples, expected: dict[str, object]) -> None:
    """Every catalogue counter/histogram moved as `expected` says, and nothing else moved.

    `expected[name]` is either {labels: delta} (compared exactly) or a number
    (the sum of the deltas over all series).
    """
    names = monotonic_names()
    unknown = set(expected) - set(names)
    assert not unknown, f"expected names not in the catalogue: {unknown}"
    problems = []
    for name in names:
        moved = changes(before, after, name)
        want = expected.get(name)
        if want is None:
            if moved:
                problems.append(f"{name} moved but should not: {moved}")
        elif isinstance(want, dict):
            if moved != want:
                problems.append(f"{name}: moved {moved}, expected {want}")
        elif round(sum(moved.values()), 9) != want:
            problems.append(f"{name}: moved {moved} (sum {sum(moved.values())}), expected {want}")
    assert not problems, "\n".join(problems)


def quiet(platform: Platform, *, timeout: float = 120) -> Samples:
    """Wait until no job is unfinished and the counters settled; return that scrape."""

    def unfinished() -> int:
        return platform.scalar(
            "SELECT count(*) FROM jobs_job WHERE NOT status = ANY(%s)", (sorted(TERMINAL),)
        )

    try:
        wait_for(lambda: unfinished() == 0, timeout=timeout, interval=0.2, what="no live jobs")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{platform.log_tails()}") from None
    return settled(platform)


def live_children(pid: int) -> set[int]:
    """Pids of the live (not zombie) children of process `pid`."""
    live = set()
    for child in psutil.Process(pid).children():
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                live.add(child.pid)
        except psutil.NoSuchProcess:
            continue
    return live
