"""The drill's verdict and table (bench.storm.report), and the command's one-line refusals."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from bench.storm.model import MB, SideResult, StormConfig
from bench.storm.probes import Counts, Sample
from bench.storm.report import judge, table


def _side(name: str, *, growth: int = 0, threads_left: int = 0, settled: int = 10) -> SideResult:
    result = SideResult(name, 10, baseline_rss=100 * MB, baseline_threads=10)
    result.samples = [
        Sample(t=1.0, rss_bytes=100 * MB + growth, threads=14, counts=Counts(in_flight=4)),
    ]
    result.end_rss, result.end_threads = 100 * MB + growth, 10 + threads_left
    result.end = Counts(succeeded=settled)
    return result


def test_judge_platform_within_bound_holds() -> None:
    verdict = judge(
        [_side("platform", growth=3 * MB), _side("stock", growth=300 * MB)], StormConfig()
    )

    assert verdict.ok
    assert "held" in verdict.lines[0]
    assert verdict.lines[1].startswith("stock Celery: RSS growth 300.0 MB")


@pytest.mark.parametrize(
    ("side", "reason"),
    [
        (_side("platform", growth=11 * MB), "grew past 10 MB"),
        (_side("platform", threads_left=2), "left 2 threads behind"),
        (_side("platform", settled=7), "lost 3 jobs"),
    ],
)
def test_judge_platform_failure_names_why(side: SideResult, reason: str) -> None:
    verdict = judge([side], StormConfig())

    assert not verdict.ok
    assert reason in verdict.lines[0]


def test_judge_stock_failures_do_not_fail_the_drill() -> None:
    assert judge([_side("stock", growth=500 * MB, threads_left=90)], StormConfig()).ok


def test_table_has_a_column_per_side() -> None:
    text = table([_side("platform"), _side("stock")])

    header = text.splitlines()[1]
    assert [cell.strip() for cell in header.strip("|").split("|")] == [
        "",
        "platform",
        "stock Celery",
    ]
    assert "RSS growth at peak (MB)" in text
    assert "threads before / peak / end" in text


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"jobs": 0}, "--jobs must be 1-10000"),
        ({"timeout": 0.1}, "--timeout must be 0.5-60 seconds"),
        ({"out": "plot.svg"}, "--out must name a .png file"),
    ],
)
def test_command_refuses_bad_values_in_one_line(options: dict[str, Any], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("jobs_storm", **options)


def test_command_names_missing_plot_dependency(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "matplotlib" else real(name, *a),
    )

    with pytest.raises(CommandError, match=r"needs matplotlib: pip install -e '\.\[drill\]'"):
        call_command("jobs_storm")


def test_command_outside_a_source_checkout_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    # given the production image's tree: no bench/ (nor devstack/)
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "bench" else real(name, *a)
    )

    # when the drill is asked for, then one line says why it cannot run
    with pytest.raises(CommandError, match="runs from a source checkout"):
        call_command("jobs_storm")
