"""The closing text of `python -m bench` (table, verdicts, notes) and its entry in docs/benchmarks.md."""

from __future__ import annotations

import datetime
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from bench.figures import Report

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def versions() -> str:
    """Python, Django, Celery, PostgreSQL and Redis versions, one line."""
    parts = [f"Python {platform.python_version()}"]
    for package in ("Django", "celery", "kombu", "gunicorn", "psycopg"):
        try:
            parts.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            continue
    for argv, label in (
        (["psql", "--version"], "PostgreSQL"),
        (["redis-server", "--version"], "Redis"),
    ):
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout.split()
        except (OSError, subprocess.SubprocessError):
            continue
        found = next(
            (w.removeprefix("v=") for w in out if w[:1].isdigit() or w.startswith("v=")), ""
        )
        if found:
            parts.append(f"{label} {found}")
    return ", ".join(parts)


def render(
    report: Report,
    *,
    command: str,
    wall: float,
    load_before: tuple[float, float, float],
    load_after: tuple[float, float, float],
    failed: list[str],
) -> str:
    """Markdown: heading with the date, command, versions, load, table, verdicts, notes."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    cpus = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip() or "?"
    lines = [
        f"### {now}: `{command.strip()}`",
        "",
        f"{cpus} cores shared with other work (load average {load_before[0]:.2f} "
        f"{load_before[1]:.2f} {load_before[2]:.2f} at the start, {load_after[0]:.2f} "
        f"{load_after[1]:.2f} {load_after[2]:.2f} at the end); {platform.system()} "
        f"{platform.release()}; {versions()}. Wall time {wall / 60:.1f} min.",
        "",
        report.table() if report.rows else "(no figures)",
        "",
        "Targets (issue 12; issue 20 where marked), ratio of medians unless the line says otherwise:",
        "",
        *(f"- {v.line()}" for v in report.verdicts),
    ]
    if failed:
        lines += ["", f"**Did not run to the end:** {', '.join(failed)} (see the log above)."]
    for note in report.notes:
        lines += ["", note]
    return "\n".join(lines) + "\n"


def append(text: str, doc: Path = DOC) -> None:
    """Append `text` under the `make bench` section of `doc` (the section is created once)."""
    heading = "## `make bench` (`python -m bench`)"
    current = doc.read_text() if doc.exists() else "# Benchmarks\n"
    if heading not in current:
        current = (
            current.rstrip("\n")
            + f"\n\n{heading}\n\nSee `python -m bench --help` and bench/__main__.py for what each benchmark does.\n"
        )
    doc.write_text(current.rstrip("\n") + "\n\n" + text)


if __name__ == "__main__":
    print(versions(), file=sys.stdout)
