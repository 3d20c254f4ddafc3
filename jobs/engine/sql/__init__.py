"""The engine's named SQL: `<dialect>.sql` files, each query under `-- name: <name>`.

`queries(dialect)` reads a dialect's file and shared.sql (the fragments both
dialects' statements share) once per process and returns {name: text}
(comment lines left out). `finish_params` turns an attempt's end
(jobs.engine.changes.ending) into the finish statements' parameters: `j_`
and `a_` prefix the job's and the attempt's columns, `set_<param>` says
whether the change sets that column (the statement keeps it otherwise).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jobs.engine.changes import RowChanges

HERE = Path(__file__).resolve().parent
# The job columns a finish statement may set; the rest are always set.
OPTIONAL_JOB_COLUMNS = ("result", "finished_at", "dead_reason", "next_attempt_at", "last_error")
ALWAYS_JOB_COLUMNS = ("status", "lease_expires_at", "waiting_reason", "waiting_detail")
ATTEMPT_COLUMNS = ("finished_at", "outcome", "error_type", "error_message", "traceback")


def _sections(name: str) -> dict[str, str]:
    """{section: text} of `<name>.sql`, comment lines left out."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in (HERE / f"{name}.sql").read_text().splitlines():
        if line.startswith("-- name:"):
            current = found.setdefault(line.removeprefix("-- name:").strip(), [])
        elif current is not None and not line.lstrip().startswith("--"):
            current.append(line)
    return {section: "\n".join(lines).strip() for section, lines in found.items()}


@cache
def queries(dialect: str, *, fused: bool = False) -> dict[str, str]:
    """{name: SQL} of `<dialect>.sql` ("postgres", "sqlite"). Raises OSError when absent.

    A dialect's `_`-named sections fill the {placeholders} of shared.sql's
    fragments; the fragments, and the dialect's own `part_`-named sections (filled
    with the fragments first), fill its statements' {placeholders}. `fused`
    (some kind has a fuse) puts the dialect's `_lease_fused` in `_lease`'s place.
    """
    own = _sections(dialect)
    values = {name: text for name, text in own.items() if name.startswith("_")}
    if fused:
        values["_lease"] = values["_lease_fused"]
    fragments = {name: text.format_map(values) for name, text in _sections("shared").items()}
    fragments |= {
        name: text.format_map(fragments) for name, text in own.items() if name.startswith("part_")
    }
    return {
        name: text.format_map(fragments)
        for name, text in own.items()
        if not name.startswith(("_", "part_"))
    }


def finish_params(changes: RowChanges) -> dict[str, Any]:
    """The finish statements' column parameters for `changes` (a success, retry or dead end).

    Raises ValueError for a change the statements cannot write (a requeue).
    """
    unknown = set(changes.job) - set(OPTIONAL_JOB_COLUMNS) - set(ALWAYS_JOB_COLUMNS)
    unknown |= set(changes.attempt) - set(ATTEMPT_COLUMNS) - {"retry_delay_seconds"}
    if unknown or not set(ALWAYS_JOB_COLUMNS) - {"lease_expires_at"} <= set(changes.job):
        raise ValueError(f"not a finish the statements write: {sorted(unknown)}")
    params: dict[str, Any] = {f"j_{name}": changes.job[name] for name in ALWAYS_JOB_COLUMNS}
    params |= {f"a_{name}": changes.attempt[name] for name in ATTEMPT_COLUMNS}
    for name in OPTIONAL_JOB_COLUMNS:
        params[f"set_j_{name}"] = name in changes.job
        params[f"j_{name}"] = changes.job.get(name)
    result = params["j_result"]
    params["j_result"] = None if result is None else json.dumps(result, allow_nan=False)
    params["j_dead_reason"] = params["j_dead_reason"] or ""
    params["j_last_error"] = params["j_last_error"] or ""
    params["set_a_retry_delay_seconds"] = "retry_delay_seconds" in changes.attempt
    params["a_retry_delay_seconds"] = changes.attempt.get("retry_delay_seconds")
    return params
