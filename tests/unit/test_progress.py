"""jobs.progress (issue 22, item 5): throttled progress writes, the API's `progress`, the admin."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from celery.events.state import State

from jobs.admin.display import progress_text
from jobs.kinds import get_kind
from jobs.models import JobStatus
from jobs.progress import Progress, ProgressReporter
from jobs.runner import execute_attempt
from jobs.task_states import send_progress

pytestmark = pytest.mark.django_db


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _reporter(job: Any, clock: Clock, sent: list[Progress]) -> ProgressReporter:
    return ProgressReporter(
        job_id=job.id,
        attempt=job.attempts_made,
        kind=job.kind,
        queue=job.queue,
        interval=0.5,
        publish=sent.append,
        clock=clock,
    )


def test_reports_are_written_at_most_every_interval_and_at_the_end(
    job_factory: Callable[..., Any],
) -> None:
    job = job_factory(status=JobStatus.RUNNING, attempts_made=1)
    clock, sent = Clock(), list[Progress]()
    report = _reporter(job, clock, sent)

    report(1, 10, "one")  # written: the first
    report(2, 10, "two")  # kept: within the interval
    clock.now += 0.6
    report(3, 10, "three")  # written
    report(10, 10, "done")  # written at once: the end
    assert [p.message for p in sent] == ["one", "three", "done"]
    job.refresh_from_db()
    assert (job.progress_done, job.progress_total, job.progress_message) == (10, 10, "done")
    assert job.progress_at is not None
    assert progress_text(job) == "100% (10 of 10) · done"


def test_a_pending_report_is_flushed_and_bad_ones_ignored(job_factory: Callable[..., Any]) -> None:
    job = job_factory(status=JobStatus.RUNNING, attempts_made=1)
    clock, sent = Clock(), list[Progress]()
    report = _reporter(job, clock, sent)
    report(1)
    report(5, message="five")
    for bad in ((-1, None), (float("nan"), None), (1, 0), (True, None)):
        report(*bad)
    report.flush()
    job.refresh_from_db()
    assert (job.progress_done, job.progress_total) == (5, None)
    assert sent[-1].ratio is None


def test_an_attempt_no_longer_running_is_not_written(job_factory: Callable[..., Any]) -> None:
    job = job_factory(status=JobStatus.CANCELLED, attempts_made=1)
    _reporter(job, Clock(), [])(1, 2)
    job.refresh_from_db()
    assert job.progress_done is None


def test_the_api_shows_progress(api_client: Any, job_factory: Callable[..., Any]) -> None:
    job = job_factory(status=JobStatus.RUNNING, attempts_made=1)
    assert api_client.get(f"/api/jobs/{job.id}/").json()["progress"] is None
    _reporter(job, Clock(), [])(25, 100, "rows")
    progress = api_client.get(f"/api/jobs/{job.id}/").json()["progress"]
    assert progress["done"] == 25
    assert progress["total"] == 100
    assert progress["ratio"] == 0.25
    assert progress["message"] == "rows"


def test_a_csv_summary_reports_progress_to_its_end(
    job_factory: Callable[..., Any], csv_root: Any, settings: Any
) -> None:
    settings.JOBS_PROGRESS_INTERVAL = 0.0
    path = csv_root / "big.csv"
    path.write_text("a,b\n" + "".join(f"{n},{n * 2}\n" for n in range(10_000)))
    payload = get_kind("report.csv_summary").validate_payload({"source": str(path)})
    job = job_factory(kind="report.csv_summary", payload=payload)
    execute_attempt(job_id=str(job.id), attempt=1, hostname="unit@test")
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED, job.last_error
    assert job.progress_total == path.stat().st_size
    assert job.progress_done == job.progress_total
    assert job.progress_message == "10,000 rows"


def test_flower_shows_a_progress_event_as_state_progress() -> None:
    # given Celery's event state (what Flower keeps) of a started attempt task
    state = State()
    state.event(
        {
            "type": "task-received",
            "uuid": "j:1",
            "name": "jobs.run_attempt",
            "timestamp": 1.0,
            "local_received": 1.0,
            "hostname": "w@h",
            "clock": 1,
        }
    )
    state.event(
        {
            "type": "task-started",
            "uuid": "j:1",
            "timestamp": 2.0,
            "local_received": 2.0,
            "hostname": "w@h",
            "clock": 2,
        }
    )

    # when the attempt's progress event arrives, as send_progress sends it
    sent: dict[str, Any] = {}

    class FakeTask:
        def send_event(self, type_: str, **fields: Any) -> None:
            sent.update(type=type_, **fields)

    send_progress(FakeTask(), Progress(25, 100, "rows"))
    state.event(
        {
            **sent,
            "uuid": "j:1",
            "timestamp": 3.0,
            "local_received": 3.0,
            "hostname": "w@h",
            "clock": 3,
        }
    )

    # then the task is in state PROGRESS with the report's fields; success still wins
    task = state.tasks["j:1"]  # type: ignore[attr-defined]
    assert task.state == "PROGRESS"
    assert (task.done, task.total, task.ratio, task.message) == (25, 100, 0.25, "rows")
    state.event(
        {
            "type": "task-succeeded",
            "uuid": "j:1",
            "timestamp": 4.0,
            "local_received": 4.0,
            "hostname": "w@h",
            "clock": 4,
        }
    )
    assert state.tasks["j:1"].state == "SUCCESS"  # type: ignore[attr-defined]


def test_a_new_attempt_starts_without_the_last_ones_progress(
    job_factory: Callable[..., Any],
) -> None:
    job = job_factory(progress_done=5, progress_total=10, progress_message="old")
    execute_attempt(job_id=str(job.id), attempt=1, hostname="unit@test")
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert (job.progress_done, job.progress_total, job.progress_message) == (None, None, "")
