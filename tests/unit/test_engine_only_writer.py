"""Only jobs/engine/ writes a job's status or an attempt's outcome, or saves with update_fields=.

Parsed with `ast` over jobs/ and observability/ (migrations and jobs/engine/
left out). Counted as a write: an assignment to an attribute `status` or
`outcome` (plain, augmented, annotated or inside a tuple), `setattr(x,
"status" | "outcome", ...)`, a `status=` / `outcome=` keyword given to a
row constructor (`Job(...)`, `Attempt(...)`) or a queryset write
(`update`, `create`, `get_or_create`, `update_or_create`, `bulk_create`),
and any `update_fields=` keyword. A value object with an `outcome` field
(AttemptReport) is not a row and is not counted, nor is a queryset write
rooted in another table's model (a schedule tick's outcome: OTHER_TABLES).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WRITTEN = {"status", "outcome"}
ROW_CALLS = {"Job", "Attempt", "update", "create", "get_or_create", "update_or_create"}
# Models whose own `status`/`outcome` columns are not a job's or an attempt's.
OTHER_TABLES = {"ScheduleTick"}


def _sources() -> Iterator[Path]:
    for package in ("jobs", "observability"):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).parts
            if "migrations" in parts or parts[:2] == ("jobs", "engine"):
                continue
            yield path


def _targets(node: ast.AST) -> Iterator[ast.AST]:
    if isinstance(node, ast.Tuple | ast.List):
        for element in node.elts:
            yield from _targets(element)
    else:
        yield node


def _called(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _root(node: ast.AST) -> str:
    """The name a call chain starts from (`ScheduleTick` in `ScheduleTick.objects.filter().update`)."""
    while isinstance(node, ast.Attribute | ast.Call):
        node = node.value if isinstance(node, ast.Attribute) else node.func
    return getattr(node, "id", "")


def writes(source: str) -> list[tuple[int, str]]:
    """(line, what) of every job status / attempt outcome write in `source` (module docstring)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in (t for each in targets for t in _targets(each)):
                if isinstance(target, ast.Attribute) and target.attr in WRITTEN:
                    found.append((node.lineno, f".{target.attr} ="))
        elif isinstance(node, ast.Call):
            name = _called(node)
            for keyword in node.keywords:
                if keyword.arg == "update_fields":
                    found.append((node.lineno, "update_fields="))
                elif (
                    keyword.arg in WRITTEN
                    and name in ROW_CALLS
                    and _root(node.func) not in OTHER_TABLES
                ):
                    found.append((node.lineno, f"{name}({keyword.arg}=...)"))
            if (
                name == "setattr"
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in WRITTEN
            ):
                found.append((node.lineno, f"setattr(..., {node.args[1].value!r})"))
    return found


def test_engine_only_writer_no_row_write_outside_jobs_engine() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in _sources()
        for line, what in writes(path.read_text())
    ]
    assert offenders == [], "write job/attempt rows through jobs.engine:\n" + "\n".join(offenders)


def test_engine_only_writer_check_finds_each_form() -> None:
    source = """
job.status = "dead"
row.outcome, x = "error", 1
job.save(update_fields=["status"])
Job.objects.filter(id=1).update(status="queued")
Attempt(outcome="error")
setattr(job, "status", "dead")
report = AttemptReport(outcome="error")
"""
    assert [what for _, what in writes(source)] == [
        ".status =",
        ".outcome =",
        "update_fields=",
        "update(status=...)",
        "Attempt(outcome=...)",
        "setattr(..., 'status')",
    ]
