"""The bench's figures: verdicts, the table, and the py-spy summary (pure logic)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bench.figures import Report, Row, Verdict, interleave, percentile
from bench.p1_drain import recycling_line
from bench.profiling import summarize


def test_verdicts_pass_and_miss_with_the_ratio() -> None:
    assert Verdict("x", 0.6, 0.5, True).line().startswith("PASS  x: 0.60")
    assert Verdict("x", 0.4, 0.5, True).line().startswith("MISS  x: 0.40")
    assert Verdict("x", 1.3, 1.2, False).line().startswith("MISS")
    assert not Verdict("x", float("nan"), 1.2, False).passed
    assert Verdict("band", 1.1, 1.2, False, low=0.8).passed
    assert not Verdict("band", 0.7, 1.2, False, low=0.8).passed


def test_table_has_median_min_max_and_ratio_to_baseline() -> None:
    report = Report()
    report.add(Row("P1", "stock", "jobs/s", [100.0, 300.0, 200.0]))
    report.add(Row("P1", "platform", "jobs/s", [50.0, 40.0, 60.0], baseline="stock"))
    table = report.table()
    assert "| P1 | stock | jobs/s | 200 | 100 | 300 | 3 |  |  |" in table
    assert "| P1 | platform | jobs/s | 50.0 | 40.0 | 60.0 | 3 | 0.25 | stock |" in table


def test_percentile_nearest_rank() -> None:
    samples = [float(n) for n in range(1, 101)]
    assert percentile(samples, 50) == 50
    assert percentile(samples, 99) == 99
    assert percentile([3.0], 99) == 3.0


def test_profile_summary_trims_the_pool_loop_and_counts_shares(tmp_path: Path) -> None:
    loop = "workloop (billiard/pool.py:350)".replace("workloop", "Worker.workloop")
    raw = tmp_path / "raw.txt"
    raw.write_text(
        f"main (celery/__main__.py:1);{loop};execute_attempt (jobs/runner.py:10);wait (psycopg/connection.py:5) 3\n"
        f"main (celery/__main__.py:1);{loop};execute_attempt (jobs/runner.py:10) 1\n"
    )
    summary = summarize(raw)
    assert "4 samples" in summary
    assert "| 100.0% | `execute_attempt (jobs/runner.py)` |" in summary
    assert "| 75.0% | `wait (psycopg/connection.py)` |" in summary
    assert "main (celery" not in summary


def test_interleave_gives_fewer_runs_to_the_steps_named_and_keeps_the_order() -> None:
    calls: list[str] = []

    def step(name: str) -> tuple[str, Callable[[], float]]:
        def measure() -> float:
            calls.append(name)
            return float(len(calls))

        return name, measure

    samples = interleave(3, [step("a"), step("b"), step("c")], fewer={"b": 1})
    assert calls == ["a", "b", "c", "a", "c", "a", "c"]
    assert [len(samples[n]) for n in "abc"] == [3, 1, 3]


def test_recycling_line_says_whether_p1_reaches_two_recycles_per_child() -> None:
    assert "every child of the platform's worker is recycled" in recycling_line(4000, True)
    assert "not reached (it takes 4000 jobs" in recycling_line(1500, False)
