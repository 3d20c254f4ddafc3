"""report.csv_summary: what it refuses — paths outside the roots, non-regular files,
bad delimiters, private destinations."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rest_framework.exceptions import ValidationError

from jobs.errors import InvalidSubmission
from jobs.kinds import PermanentError, get_kind
from jobs.kinds.csv_summary import CsvSummary
from jobs.services import job_submit

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

    with pytest.raises(PermanentError, match="(?i)not a directory"):
        CsvSummary().run(payload, attempt_context())


def test_csv_summary_run_permission_denied_is_permanent(
    csv_root: Path, attempt_context: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Simulated: the tests may run as root, which ignores file modes.
    # The file is opened by name relative to its directory (jobs.kinds.localfiles).
    payload = _validated(csv_root)
    real_open = os.open

    def denying_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path) == Path(payload["source"]).name and kwargs.get("dir_fd") is not None:
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
    assert {column["name"]: column for column in result["columns"]}["b"]["mean"] == 2.0


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
