"""report.csv_summary: exact column statistics, path restriction, bounded memory."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rest_framework.exceptions import ValidationError

from jobs.kinds import Cancelled, PermanentError, get_kind
from jobs.kinds.csv_summary import MAX_COLUMNS, ColumnStats, CsvSummary, summarise

SMALL_CSV = (
    "name,age,score,city\nalice,30,1.5,Paris\nbob,,2.5,paris\ncarol,40,NA,Berlin\ndave,50,x,\n"
)


def _by_name(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {column["name"]: column for column in result["columns"]}


@pytest.fixture
def summarise_file(
    csv_root: Path, attempt_context: Callable[..., Any]
) -> Callable[..., dict[str, Any]]:
    """summarise_file(text, **payload) -> the kind's result for a file under csv_root."""

    def run(text: str, *, name: str = "data.csv", **payload: Any) -> dict[str, Any]:
        path = csv_root / name
        path.write_text(text, encoding="utf-8")
        kind = CsvSummary()
        validated = kind.validate_payload({"source": str(path), **payload})
        return kind.run(validated, attempt_context())

    return run


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
    import json

    result = summarise_file(SMALL_CSV)

    assert json.loads(json.dumps(result)) == result


# Regression (fixed): the running total of finite values can overflow to
# inf, so "mean" becomes Infinity, which is not JSON; the job row's JSON
# column then rejects the result. Fix: track the mean incrementally
# (mean += (x - mean) / n) or report None when the total is not finite.
def test_csv_summary_huge_values_result_is_strict_json(summarise_file: Callable[..., Any]) -> None:
    import json

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


# --- path restriction (validated at submit time) -----------------------------


def test_csv_summary_path_outside_roots_rejected_at_validation(
    csv_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outside = tmp_path_factory.mktemp("outside") / "secret.csv"
    outside.write_text("a\n1\n")

    with pytest.raises(ValidationError) as info:
        get_kind("report.csv_summary").validate_payload({"source": str(outside)})

    assert "source" in info.value.detail


@pytest.mark.parametrize("source", ["/etc/passwd", "../../etc/passwd"])
def test_csv_summary_system_paths_rejected(csv_root: Path, source: str) -> None:
    if source.startswith(".."):
        source = str(csv_root / source)

    with pytest.raises(ValidationError):
        get_kind("report.csv_summary").validate_payload({"source": source})


def test_csv_summary_symlink_escaping_root_rejected(
    csv_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # given a link inside the root that points outside it
    outside = tmp_path_factory.mktemp("outside") / "secret.csv"
    outside.write_text("a\n1\n")
    link = csv_root / "link.csv"
    link.symlink_to(outside)

    # then validation follows the link and rejects it
    with pytest.raises(ValidationError):
        get_kind("report.csv_summary").validate_payload({"source": str(link)})


def test_csv_summary_path_inside_root_normalised(csv_root: Path) -> None:
    (csv_root / "sub").mkdir()
    target = csv_root / "sub" / "a.csv"
    target.write_text("a\n1\n")

    payload = get_kind("report.csv_summary").validate_payload(
        {"source": str(csv_root / "sub" / ".." / "sub" / "a.csv")}
    )

    assert payload["source"] == str(target.resolve())
    assert payload == {
        "source": str(target.resolve()),
        "delimiter": ",",
        "has_header": True,
        "distinct_cap": 1000,
    }


@pytest.mark.parametrize(
    "payload",
    [
        {"source": "http://127.0.0.1/x.csv", "delimiter": ";;"},
        {"source": "http://127.0.0.1/x.csv", "distinct_cap": 0},
        {"source": "http://127.0.0.1/x.csv", "distinct_cap": 100_001},
        {"source": "http://"},
    ],
)
def test_csv_summary_invalid_payload_rejected(payload: dict) -> None:
    with pytest.raises(ValidationError):
        get_kind("report.csv_summary").validate_payload(payload)


# --- non-regular files (directories, FIFOs) ----------------------------------


def _source_error(source: str) -> str:
    with pytest.raises(ValidationError) as info:
        get_kind("report.csv_summary").validate_payload({"source": source})
    assert list(info.value.detail) == ["source"]
    return str(info.value.detail["source"][0])


def test_csv_summary_directory_rejected_at_validation(csv_root: Path) -> None:
    (csv_root / "sub").mkdir()

    assert "is a directory" in _source_error(str(csv_root / "sub"))
    assert "is a directory" in _source_error(str(csv_root))


def test_csv_summary_fifo_rejected_at_validation(csv_root: Path) -> None:
    os.mkfifo(csv_root / "pipe.csv")

    assert "not a regular file" in _source_error(str(csv_root / "pipe.csv"))


def test_csv_summary_symlink_to_directory_rejected(csv_root: Path) -> None:
    (csv_root / "sub").mkdir()
    (csv_root / "link.csv").symlink_to(csv_root / "sub")

    assert "is a directory" in _source_error(str(csv_root / "link.csv"))


@pytest.mark.django_db
def test_csv_summary_directory_reported_as_payload_source(csv_root: Path) -> None:
    from jobs.errors import InvalidSubmission
    from jobs.services import job_submit

    with pytest.raises(InvalidSubmission) as info:
        job_submit(kind="report.csv_summary", payload={"source": str(csv_root)})

    assert list(info.value.errors) == ["payload.source"]


def test_csv_summary_not_yet_existing_file_still_accepted(csv_root: Path) -> None:
    payload = get_kind("report.csv_summary").validate_payload(
        {"source": str(csv_root / "later.csv")}
    )

    assert payload["source"] == str(csv_root / "later.csv")


def _validated(csv_root: Path, name: str = "data.csv") -> dict[str, Any]:
    (csv_root / name).write_text("a\n1\n")
    return CsvSummary().validate_payload({"source": str(csv_root / name)})


def test_csv_summary_run_directory_is_permanent(
    csv_root: Path, attempt_context: Callable[..., Any]
) -> None:
    # given a file accepted at submit, replaced by a directory before the run
    payload = _validated(csv_root)
    (csv_root / "data.csv").unlink()
    (csv_root / "data.csv").mkdir()

    with pytest.raises(PermanentError, match="not a regular file|directory"):
        CsvSummary().run(payload, attempt_context())


def test_csv_summary_run_fifo_is_permanent_without_blocking(
    csv_root: Path, attempt_context: Callable[..., Any]
) -> None:
    # given a file accepted at submit, replaced by a FIFO nobody writes to
    payload = _validated(csv_root)
    (csv_root / "data.csv").unlink()
    os.mkfifo(csv_root / "data.csv")

    started = time.monotonic()
    with pytest.raises(PermanentError, match="not a regular file"):
        CsvSummary().run(payload, attempt_context())
    assert time.monotonic() - started < 1


def test_csv_summary_run_parent_not_a_directory_is_permanent(
    csv_root: Path, attempt_context: Callable[..., Any]
) -> None:
    # given a path below a regular file: accepted (it does not exist), fails at run
    (csv_root / "file").write_text("x")
    payload = CsvSummary().validate_payload({"source": str(csv_root / "file" / "data.csv")})

    with pytest.raises(PermanentError, match="Not a directory"):
        CsvSummary().run(payload, attempt_context())


def test_csv_summary_run_permission_denied_is_permanent(
    csv_root: Path, attempt_context: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Simulated: the tests may run as root, which ignores file modes.
    payload = _validated(csv_root)
    real_open = os.open

    def denying_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path) == payload["source"]:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", denying_open)

    with pytest.raises(PermanentError, match="Permission denied"):
        CsvSummary().run(payload, attempt_context())


def test_csv_summary_unreadable_file_rejected_at_validation(
    csv_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = csv_root / "data.csv"
    target.write_text("a\n1\n")
    real_stat = Path.stat

    def denying_stat(self: Path, *args: Any, **kwargs: Any) -> os.stat_result:
        if self == target:
            raise PermissionError(13, "Permission denied", str(self))
        return real_stat(self, *args, **kwargs)

    monkeypatch.setattr(Path, "stat", denying_stat)

    assert "Permission denied" in _source_error(str(target))


# --- delimiters --------------------------------------------------------------


@pytest.mark.parametrize(("delimiter", "text"), [("\t", "a\tb\n1\t2\n"), (" ", "a b\n1 2\n")])
def test_csv_summary_whitespace_delimiters_accepted(
    summarise_file: Callable[..., Any], delimiter: str, text: str
) -> None:
    result = summarise_file(text, delimiter=delimiter)

    assert [c["name"] for c in result["columns"]] == ["a", "b"]
    assert _by_name(result)["b"]["mean"] == 2.0


def test_csv_summary_tab_delimiter_kept_verbatim(csv_root: Path) -> None:
    payload = get_kind("report.csv_summary").validate_payload(
        {"source": str(csv_root / "a.tsv"), "delimiter": "\t"}
    )

    assert payload["delimiter"] == "\t"


@pytest.mark.parametrize(
    ("delimiter", "reason"),
    [
        ("\n", "line break"),
        ("\r", "line break"),
        ('"', "quote character"),
        ("\x00", "Null characters"),
        ("", "blank"),
        ("\t\t", "no more than 1"),
    ],
)
def test_csv_summary_unusable_delimiters_rejected(
    csv_root: Path, delimiter: str, reason: str
) -> None:
    with pytest.raises(ValidationError) as info:
        get_kind("report.csv_summary").validate_payload(
            {"source": str(csv_root / "a.csv"), "delimiter": delimiter}
        )

    assert list(info.value.detail) == ["delimiter"]
    assert reason in str(info.value.detail["delimiter"][0])


# --- private destinations (SSRF) ---------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "http://127.0.0.1:6379/",
        "http://169.254.169.254/latest/meta-data/",
        "https://192.168.0.10/data.csv",
        "http://[::1]/x.csv",
        "http://localhost/x.csv",
    ],
)
def test_csv_summary_literal_private_url_rejected_when_restricted(
    settings: Any, source: str
) -> None:
    settings.JOBS_ALLOW_PRIVATE_DESTINATIONS = False

    assert "private destinations are not allowed" in _source_error(source)


def test_csv_summary_private_url_accepted_when_allowed(settings: Any) -> None:
    settings.JOBS_ALLOW_PRIVATE_DESTINATIONS = True

    payload = get_kind("report.csv_summary").validate_payload({"source": "http://127.0.0.1/x"})

    assert payload["source"] == "http://127.0.0.1/x"
