"""A job read as Django's TaskResult, and the context a `takes_context` task gets.

Statuses: delayed, queued and retrying are READY (waiting to run, again
for a retry), running is RUNNING, succeeded is SUCCESSFUL, dead and
cancelled are FAILED. `errors` holds one TaskError per failed attempt, its
traceback as stored (the last 20,000 characters); `worker_ids` one
`hostname:pid` per attempt started, so `attempts` is the platform's count.
`enqueued_at` is when the job was first accepted, `started_at` its first
attempt's start, `last_attempted_at` its latest, `finished_at` when it
reached a terminal state.
"""

from __future__ import annotations

import builtins
import uuid
from dataclasses import dataclass
from typing import Any

from jobs.kinds import get_kind
from jobs.kinds.base import AttemptContext
from jobs.models import Attempt, AttemptOutcome, Job, JobStatus
from jobs.taskbackend.compat import (
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
)

STATUSES: dict[str, TaskResultStatus] = {
    JobStatus.DELAYED: TaskResultStatus.READY,
    JobStatus.QUEUED: TaskResultStatus.READY,
    JobStatus.RETRYING: TaskResultStatus.READY,
    JobStatus.RUNNING: TaskResultStatus.RUNNING,
    JobStatus.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    JobStatus.DEAD: TaskResultStatus.FAILED,
    JobStatus.CANCELLED: TaskResultStatus.FAILED,
}

# Errors the platform records without a Python traceback of the task's own.
_PLATFORM_ERRORS = {
    "SoftTimeLimitExceeded": "celery.exceptions.SoftTimeLimitExceeded",
    "TimeLimitExceeded": "billiard.exceptions.TimeLimitExceeded",
    "HardTimeout": "billiard.exceptions.TimeLimitExceeded",
    "WorkerLostError": "billiard.exceptions.WorkerLostError",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class JobsTaskContext(TaskContext):
    """Django's TaskContext (`task_result`, `attempt`) with the platform's AttemptContext.

    `job` is the running attempt's AttemptContext: its deadlines,
    `raise_if_cancelled()`, and `progress()` where the platform offers it.
    """

    job: AttemptContext


def exception_class_path(attempt: Attempt) -> str:
    """The dotted path of the exception that ended `attempt`, as TaskError wants it.

    Python's traceback ends with `module.Class: message` (bare `Class` for
    builtins); the platform's own errors map to Celery's and billiard's.
    """
    name = attempt.error_type
    lines = [line for line in attempt.traceback.strip().splitlines() if line and line[0] != " "]
    if lines:
        last = lines[-1].split(":", 1)[0].strip()
        if last.endswith(name) and "." in last:
            return last
    if name in _PLATFORM_ERRORS:
        return _PLATFORM_ERRORS[name]
    if isinstance(getattr(builtins, name, None), type):
        return f"builtins.{name}"
    return name


def task_result(job: Job, task: Task) -> TaskResult:
    """`job` (attempts prefetched or not) as Django's TaskResult of `task`."""
    attempts = list(job.attempts.all()) if job.pk else []
    payload = job.payload if isinstance(job.payload, dict) else {}
    result: TaskResult[Any] = TaskResult(
        task=task,
        id=str(job.id),
        status=STATUSES[job.status],
        enqueued_at=job.created_at,
        started_at=attempts[0].started_at if attempts else None,
        finished_at=job.finished_at if job.is_terminal else None,
        last_attempted_at=attempts[-1].started_at if attempts else None,
        args=payload.get("args", []),
        kwargs=payload.get("kwargs", {}),
        backend=task.backend,
        errors=[
            TaskError(exception_class_path=exception_class_path(a), traceback=a.traceback)
            for a in attempts
            if a.outcome and a.outcome != AttemptOutcome.SUCCEEDED
        ],
        worker_ids=[f"{a.worker_hostname}:{a.worker_pid}" for a in attempts],
    )
    if job.status == JobStatus.SUCCEEDED:
        object.__setattr__(result, "_return_value", job.result)
    return result


def task_of(job: Job) -> Task | None:
    """The Django task `job` runs, or None when its kind is not a task's."""
    try:
        kind = get_kind(job.kind)
    except LookupError:
        return None
    # A TaskKind (jobs.taskbackend.kind, which imports this module) carries its task.
    task = getattr(kind, "task", None)
    return task if isinstance(task, Task) else None


def result_for(result_id: str) -> TaskResult:
    """The TaskResult of the job `result_id`. Raises TaskResultDoesNotExist."""
    try:
        job_id = uuid.UUID(str(result_id))
    except ValueError:
        raise TaskResultDoesNotExist(result_id) from None
    job = Job.objects.prefetch_related("attempts").filter(id=job_id).first()
    task = task_of(job) if job is not None else None
    if job is None or task is None:
        raise TaskResultDoesNotExist(result_id)
    return task_result(job, task)


def context_for(task: Task, ctx: AttemptContext) -> Any:
    """The context a `takes_context` task is called with, for the running attempt `ctx`."""
    job = Job.objects.prefetch_related("attempts").get(id=ctx.job_id)
    return JobsTaskContext(task_result=task_result(job, task), job=ctx)
