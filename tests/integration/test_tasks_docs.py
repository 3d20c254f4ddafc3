"""Django's Tasks documentation examples run unchanged against jobs.taskbackend with a real
worker (issue 22, Acceptance): define, enqueue, get_result, refresh, run_after, priorities,
queue_name, takes_context and the signals. On Django 5.2 + the backport (default suite) and
on Django 6.x (`make test-django6`). About 20 s.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.harness import Platform

SCRIPT = Path(__file__).with_name("tasks_docs_script.py")


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_djangos_tasks_documentation_examples_run_on_the_platform(
    platform_factory: Callable[..., Platform], tmp_path: Path
) -> None:
    signal_log = tmp_path / "signals.jsonl"
    platform = platform_factory(
        "tasks_docs",
        env={
            "DJANGO_SETTINGS_MODULE": "tests.tasks_docs_app.settings",
            "JOBS_QUEUES": "default,emails",
            "TASKS_DOCS_SIGNAL_LOG": str(signal_log),
        },
        web=False,
    )
    try:
        run = platform.stack.run(
            ["python", "manage.py", "shell", "-c", f"exec(open({str(SCRIPT)!r}).read())"],
            timeout=150,
        )
    except subprocess.CalledProcessError as exc:
        raise AssertionError(f"{exc.stderr}\n{exc.stdout}\n{platform.log_tails()}") from None
    (line,) = [text for text in run.stdout.splitlines() if text.startswith("RESULTS=")]
    out = json.loads(line.removeprefix("RESULTS="))
    print("tasks docs:", json.dumps(out))

    # enqueue, refresh, get_result
    assert out["enqueued"] == "READY"
    assert out["status"] == "SUCCESSFUL"
    assert out["return_value"] == 1  # send_mail's count
    assert out["attempts"] == 1
    assert len(out["worker_ids"]) == 1
    assert out["get_result"] == "SUCCESSFUL"
    assert out["backend_get_result"] == 1
    assert out["finished_after_start"] is True
    # priorities and queue_name
    assert out["priorities"] == ["SUCCESSFUL", "SUCCESSFUL"]
    # takes_context
    assert out["context"]["attempt"] == 1
    assert out["context"]["sent"] == 1
    # run_after: waits, then starts on time
    assert out["run_after_waiting"] == "READY"
    assert out["run_after_status"] == "SUCCESSFUL"
    assert 0 <= out["run_after_started_late_by"] <= 2.0

    # signals: enqueued in the enqueuing process, started and finished in the worker
    seen = [json.loads(text) for text in signal_log.read_text().splitlines()]
    first = [(status, pid) for pid, job_id, status in seen if job_id == out["id"]]
    assert [status for status, _ in first] == ["READY", "RUNNING", "SUCCESSFUL"]
    assert first[0][1] != first[1][1]  # enqueued here, run by a worker child
