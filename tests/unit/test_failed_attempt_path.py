"""A failed attempt's path from the runner to its metric crosses the modules docs/engine.md lists.

The call stack at the moment jobs_attempts_total moves, for a failed attempt
run by jobs.runner.execute_attempt (what jobs.tasks.run_attempt_task calls).
A module added to the path fails here: update docs/engine.md ("A failed
attempt's path") with it, or take it out again.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jobs.runner import execute_attempt
from observability import metrics as m

ROOT = Path(__file__).resolve().parents[2]
# jobs.tasks.run_attempt_task calls jobs.runner.execute_attempt: the test starts there.
PATH = [
    "jobs/runner.py",
    "jobs/db.py",
    "jobs/engine/__init__.py",
    "jobs/telemetry/job_events.py",
]


def _project_modules(stack: traceback.StackSummary) -> list[str]:
    """The project's source files on `stack`, outermost first, each once (tests left out)."""
    modules: list[str] = []
    for frame in stack:
        path = Path(frame.filename)
        if not path.is_relative_to(ROOT) or ".venv" in path.parts or "tests" in path.parts:
            continue
        module = str(path.relative_to(ROOT))
        if module not in modules:
            modules.append(module)
    return modules


@pytest.mark.django_db(transaction=True)
def test_failed_attempt_path_to_its_metric_crosses_the_listed_modules(
    job_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a job whose first attempt fails, and the stack recorded when its counter moves
    job = job_factory(payload={"fail_times": 2, "sleep_seconds": 0})
    stacks: list[traceback.StackSummary] = []
    labels = m.jobs_attempts_total.labels

    def recording(*values: str) -> Any:
        stacks.append(traceback.extract_stack())
        return labels(*values)

    monkeypatch.setattr(m.jobs_attempts_total, "labels", recording)

    # when the attempt runs here
    execute_attempt(job_id=str(job.id), attempt=1, hostname="unit@test")

    # then the counter moved once, through the listed modules (then observability.metrics)
    assert len(stacks) == 1
    assert _project_modules(stacks[0]) == PATH
