"""`python -m bench --quick` runs and prints numbers (not the targets: see docs/benchmarks.md).

The default run covers P1 (PostgreSQL; stock tracked and defaults; the
Django + django-celery-results anchor with and without CELERY_DB_REUSE_MAX)
and P2 (with the hand-written Django app) in about a minute. Like the other
benchmarks' quick sizes it runs under `pytest -m soak`, on demand, not in CI
(`.ci/run` is at its 45-minute budget).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.harness import require_postgres

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
NUMBER = r"[0-9][0-9,]*(?:\.[0-9]+)?"


def run_bench(*args: str, timeout: float) -> str:
    require_postgres()
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--no-record", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc.stdout


def median_of(out: str, bench: str, variant: str) -> float:
    """The median column of the table row (bench, variant); fails when absent or not a number."""
    match = re.search(
        rf"^\| {re.escape(bench)} \| {re.escape(variant)} \| [^|]+ \| ({NUMBER}) \|", out, re.M
    )
    assert match, f"no row {bench} / {variant} in:\n{out[-3000:]}"
    return float(match.group(1).replace(",", ""))


@pytest.mark.timeout(180)
@pytest.mark.soak
def test_quick_p1_p2_print_numbers_and_verdicts() -> None:
    out = run_bench("p1", "p2", "--db", "postgres", timeout=170)
    for variant in (
        "platform-pg",
        "stock-tracked",
        "stock-defaults",
        "anchor-reuse",
        "anchor-defaults",
    ):
        assert median_of(out, "P1", variant) > 0
    for variant in ("platform", "handwritten", "bare"):
        assert median_of(out, "P2 rate", variant) > 0
        assert median_of(out, "P2 p99", variant) > 0
    assert re.search(
        r"^- (PASS|MISS)  P1 PostgreSQL vs Django \+ django-celery-results with "
        r"CELERY_DB_REUSE_MAX \(issue 20\): " + NUMBER,
        out,
        re.M,
    )
    assert re.search(
        r"^- (PASS|MISS)  P1 PostgreSQL vs stock tracked \(issue 20\): " + NUMBER, out, re.M
    )
    assert re.search(r"^P1 size: 20 jobs .* child recycling is not reached", out, re.M)
    assert re.search(r"^P2 vs the hand-written Django app .* p99 " + NUMBER, out, re.M)


@pytest.mark.soak
@pytest.mark.timeout(900)
def test_quick_everything_else_prints_numbers() -> None:
    out = run_bench("storm", "p3", "p4", "p5", "memory", timeout=880)
    assert median_of(out, "P1", "platform-storm") > 0
    assert median_of(out, "P1", "stock-storm") > 0
    assert median_of(out, "P1", "anchor-storm") > 0
    assert median_of(out, "P3 worker RSS idle", "platform") > 0
    assert median_of(out, "P3 fresh latency pending", "stock") > 0
    assert median_of(out, "P4 worker /metrics", "after recycles") > 0
    assert median_of(out, "P4 web /metrics", "after recycles") > 0
    assert median_of(out, "P5 web p99", "platform loaded") > 0
    assert median_of(out, "Memory idle RSS", "worker child") > 0
    assert median_of(out, "Memory idle RSS", "stock child") > 0
    assert median_of(out, "Memory idle RSS", "anchor child") > 0
    assert re.search(
        r"^- (PASS|MISS)  P1 storm vs own success path \(postgres\) \(issue 20\): ", out, re.M
    )
    assert re.search(r"^- (PASS|MISS)  Memory idle worker child vs the anchor's child ", out, re.M)


def test_bad_benchmark_name_is_one_readable_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "p9"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "unknown benchmark p9" in proc.stderr
