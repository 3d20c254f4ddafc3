"""jobs.taskbackend (issue 22, item 3): Django's Tasks API on the platform, attempts run here.

The same module runs on Django 5.2 with the django-tasks backport (the
default suite) and on Django 6.x's django.tasks (`make test-django6`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from jobs.kinds import get_kind, policy_for
from jobs.models import Job, JobStatus
from jobs.runner import execute_attempt
from jobs.taskbackend import JobsBackend, platform_priority
from jobs.taskbackend.compat import (
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_enqueued,
    task_finished,
    task_started,
)
from tests.byow_app import tasks

pytestmark = pytest.mark.django_db


def _run(result_id: str, attempt: int = 1) -> None:
    execute_attempt(job_id=result_id, attempt=attempt, hostname="unit@test")


def test_enqueue_makes_a_job_of_the_tasks_name() -> None:
    result = tasks.add.enqueue(2, b=3)
    job = Job.objects.get(id=result.id)
    assert job.kind == "tests.byow_app.tasks.add"
    assert job.payload == {"args": [2], "kwargs": {"b": 3}}
    assert job.priority == platform_priority(0) == 4
    assert result.status == TaskResultStatus.READY
    assert result.backend == "default"
    assert isinstance(tasks.add.get_backend(), JobsBackend)


def test_get_result_and_refresh_read_the_job() -> None:
    result = tasks.add.enqueue(2, 3)
    _run(result.id)
    fetched = tasks.add.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL
    assert fetched.return_value == 5
    assert fetched.attempts == 1
    assert fetched.worker_ids[0].startswith("unit@test:")
    assert fetched.started_at is not None
    assert fetched.finished_at is not None
    result.refresh()
    assert result.is_finished
    assert result.return_value == 5


def test_a_failure_is_retried_and_its_error_kept_with_the_traceback() -> None:
    result = tasks.work.enqueue(fail_times=1)
    _run(result.id)
    result.refresh()
    assert result.status == TaskResultStatus.READY  # waiting for its retry
    assert Job.objects.get(id=result.id).status == JobStatus.RETRYING
    (error,) = result.errors
    assert error.exception_class is ConnectionError
    assert "transient failure 1 of 1" in error.traceback
    assert "Traceback" in error.traceback


def test_takes_context_gets_the_attempt() -> None:
    result = tasks.work.enqueue()
    _run(result.id)
    result.refresh()
    value: Any = result.return_value
    assert value["attempt"] == 1
    assert value["worker"].startswith("unit@test:")


def test_non_json_arguments_are_refused_at_enqueue_by_django() -> None:
    with pytest.raises(TypeError):
        tasks.add.enqueue(object(), 1)  # type: ignore[arg-type]
    assert not Job.objects.exists()


def test_run_after_priority_and_queue_are_kept() -> None:
    due = timezone.now() + timedelta(minutes=5)
    result = tasks.add.using(run_after=due, priority=100).enqueue(1, 1)
    job = Job.objects.get(id=result.id)
    assert job.status == JobStatus.DELAYED
    assert job.run_after == due
    assert job.priority == 0
    assert platform_priority(-100) == 9
    with pytest.raises(InvalidTask):
        tasks.add.using(queue_name="nowhere")


def test_policy_from_the_decorator_and_overrides(settings: Any) -> None:
    assert get_kind("tests.byow_app.tasks.work").policy.max_attempts == 3
    settings.JOBS_KIND_OVERRIDES = {"tests.byow_app.tasks.work": {"max_attempts": 7}}
    assert policy_for("tests.byow_app.tasks.work").max_attempts == 7


def test_an_unknown_result_does_not_exist() -> None:
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result("not-a-job")
    job = Job.objects.create(kind="demo.flaky", payload={}, max_attempts=1, request_fingerprint="x")
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result(str(job.id))


def test_djangos_task_signals_fire(django_capture_on_commit_callbacks: Any) -> None:
    seen: list[tuple[str, str]] = []

    def record(name: str) -> Any:
        def receiver(sender: Any, task_result: Any, **_: Any) -> None:
            seen.append((name, task_result.status))

        return receiver

    receivers = [
        (s, record(n))
        for s, n in (
            (task_enqueued, "enqueued"),
            (task_started, "started"),
            (task_finished, "finished"),
        )
    ]
    for signal, receiver in receivers:
        signal.connect(receiver)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            result = tasks.add.enqueue(1, 2)
        with django_capture_on_commit_callbacks(execute=True):
            _run(result.id)
    finally:
        for signal, receiver in receivers:
            signal.disconnect(receiver)
    assert seen == [
        ("enqueued", TaskResultStatus.READY),
        ("started", TaskResultStatus.RUNNING),
        ("finished", TaskResultStatus.SUCCESSFUL),
    ]


def test_aenqueue_and_aget_result() -> None:
    result = async_to_sync(tasks.add.aenqueue)(4, 5)
    assert Job.objects.get(id=result.id).payload == {"args": [4, 5], "kwargs": {}}
    fetched = async_to_sync(tasks.add.aget_result)(result.id)
    assert fetched.status == TaskResultStatus.READY
