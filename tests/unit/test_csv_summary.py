"""report.csv_summary: exact column statistics, path restriction, bounded memory."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jobs.kinds import Cancelled, PermanentError
from jobs.kinds.csv_summary import MAX_COLUMNS, ColumnStats, CsvSummary, summarise

SMALL_CSV = (
    "name,age,score,city\nalice,30,1.5,Paris\nbob,,2.5,paris\ncarol,40,NA,Berlin\ndave,50,x,\n"
)


def _by_name(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {column["name"]: column for column in result["columns"]}


# --- ColumnStats -------------------------------------------------------------


def test_column_stats_counts_nulls_numbers_and_distinct() -> None:
    stats = ColumnStats("x", cap=10)

    for value in ["1", " 2 ", "", "NULL", "n/a", "abc", "2", "inf", "-3.5"]:
        stats.add(value)

    summary = stats.summary()
    assert summary["count"] == 9
    assert summary["null_count"] == 3
    # "inf" is not finite: it counts as a distinct value, not as a number.
    assert summary["numeric_count"] == 4
    assert summary["min"] == -3.5
    assert summary["max"] == 2.0
    assert summary["mean"] == pytest.approx((1 + 2 + 2 - 3.5) / 4)
    assert summary["distinct_count"] == 5  # 1, 2, abc, inf, -3.5
    assert summary["distinct_capped"] is False


def test_column_stats_cap_exactly_reached_is_not_capped() -> None:
    stats = ColumnStats("x", cap=3)

    for value in ["a", "b", "c", "a"]:
        stats.add(value)

    assert (stats.summary()["distinct_count"], stats.summary()["distinct_capped"]) == (3, False)


def test_column_stats_over_cap_reports_cap_and_frees_the_set() -> None:
    stats = ColumnStats("x", cap=3)

    for value in ["a", "b", "c", "d", "e"]:
        stats.add(value)

    summary = stats.summary()
    assert (summary["distinct_count"], summary["distinct_capped"]) == (3, True)
    assert stats.distinct == set()


def test_column_stats_no_numbers_gives_none() -> None:
    stats = ColumnStats("x", cap=3)
    stats.add("word")

    summary = stats.summary()
    assert (summary["min"], summary["max"], summary["mean"]) == (None, None, None)


# --- summaries of files ------------------------------------------------------


def test_csv_summary_small_file_exact_stats(summarise_file: Callable[..., Any]) -> None:
    result = summarise_file(SMALL_CSV)

    assert result["rows"] == 4
    columns = _by_name(result)
    assert list(columns) == ["name", "age", "score", "city"]
    assert columns["name"] == {
        "name": "name",
        "count": 4,
        "null_count": 0,
        "numeric_count": 0,
        "min": None,
        "max": None,
        "mean": None,
        "distinct_count": 4,
        "distinct_capped": False,
    }
    assert columns["age"] == {
        "name": "age",
        "count": 4,
        "null_count": 1,
        "numeric_count": 3,
        "min": 30.0,
        "max": 50.0,
        "mean": 40.0,
        "distinct_count": 3,
        "distinct_capped": False,
    }
    assert columns["score"] == {
        "name": "score",
        "count": 4,
        "null_count": 1,
        "numeric_count": 2,
        "min": 1.5,
        "max": 2.5,
        "mean": 2.0,
        "distinct_count": 3,
        "distinct_capped": False,
    }
    assert columns["city"]["null_count"] == 1
    assert columns["city"]["distinct_count"] == 3  # case-sensitive: Paris, paris, Berlin


def test_csv_summary_distinct_cap_from_payload(summarise_file: Callable[..., Any]) -> None:
    result = summarise_file(SMALL_CSV, distinct_cap=2)

    name = _by_name(result)["name"]
    assert (name["distinct_count"], name["distinct_capped"]) == (2, True)
    assert _by_name(result)["city"]["distinct_capped"] is True


def test_csv_summary_without_header_names_columns(summarise_file: Callable[..., Any]) -> None:
    result = summarise_file("1,a\n2,b\n3,c\n", has_header=False)

    assert result["rows"] == 3
    columns = _by_name(result)
    assert list(columns) == ["column_1", "column_2"]
    assert columns["column_1"]["mean"] == 2.0
    assert columns["column_2"]["distinct_count"] == 3


def test_csv_summary_header_row_is_not_counted(summarise_file: Callable[..., Any]) -> None:
    with_header = summarise_file("n\n1\n2\n", name="a.csv")
    without_header = summarise_file("n\n1\n2\n", name="b.csv", has_header=False)

    assert with_header["rows"] == 2
    assert without_header["rows"] == 3
    assert _by_name(without_header)["column_1"]["numeric_count"] == 2


def test_csv_summary_custom_delimiter_and_ragged_rows(summarise_file: Callable[..., Any]) -> None:
    result = summarise_file("a;b\n1;2\n3;4;5\n6\n", delimiter=";")

    columns = _by_name(result)
    assert list(columns) == ["a", "b", "column_3"]
    assert columns["a"]["count"] == 3
    assert columns["b"]["count"] == 2
    assert columns["column_3"]["count"] == 1


def test_csv_summary_blank_header_cell_gets_a_name(summarise_file: Callable[..., Any]) -> None:
    result = summarise_file("a,,c\n1,2,3\n")

    assert [c["name"] for c in result["columns"]] == ["a", "column_2", "c"]


def test_csv_summary_too_many_columns_is_permanent(summarise_file: Callable[..., Any]) -> None:
    wide = ",".join(["1"] * (MAX_COLUMNS + 1))

    with pytest.raises(PermanentError, match="columns"):
        summarise_file(f"{wide}\n", has_header=False)


def test_csv_summary_oversized_field_is_permanent(summarise_file: Callable[..., Any]) -> None:
    # csv's field_size_limit (128 KiB) bounds one field's memory.
    with pytest.raises(PermanentError, match="malformed CSV"):
        summarise_file('a\n"' + "x" * 200_000 + '"\n')


def test_csv_summary_missing_file_is_permanent(
    csv_root: Path, attempt_context: Callable[..., Any]
) -> None:
    kind = CsvSummary()
    payload = kind.validate_payload({"source": str(csv_root / "missing.csv")})

    with pytest.raises(PermanentError, match="no such file"):
        kind.run(payload, attempt_context())


def test_csv_summary_result_is_json_serialisable(summarise_file: Callable[..., Any]) -> None:

    result = summarise_file(SMALL_CSV)

    assert json.loads(json.dumps(result)) == result


# Regression (fixed): the running total of finite values can overflow to
# inf, so "mean" becomes Infinity, which is not JSON; the job row's JSON
# column then rejects the result. Fix: track the mean incrementally
# (mean += (x - mean) / n) or report None when the total is not finite.
def test_csv_summary_huge_values_result_is_strict_json(summarise_file: Callable[..., Any]) -> None:

    result = summarise_file("x\n1e308\n1e308\n")

    json.dumps(result, allow_nan=False)
    assert _by_name(result)["x"]["mean"] == pytest.approx(1e308)


def test_csv_summary_cancelled_attempt_stops(attempt_context: Callable[..., Any]) -> None:
    # given a cancelled attempt and a long CSV
    ctx = attempt_context()
    ctx.cancel_event.set()
    lines = iter(["n\n"] + [f"{i}\n" for i in range(10_000)])
    payload = {"delimiter": ",", "has_header": True, "distinct_cap": 10}

    # then summarising stops with Cancelled
    with pytest.raises(Cancelled):
        summarise(lines, payload, ctx)
