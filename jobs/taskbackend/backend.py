"""JobsBackend: Django's Tasks framework run by the platform.

    TASKS = {"default": {"BACKEND": "jobs.taskbackend.JobsBackend"}}

Every `@task` function becomes a job kind named by its dotted path
(`myapp.tasks.send_report`), registered when it is decorated; the jobs app
imports every installed app's `tasks` module at startup (jobs.kinds.
discovery), so web, worker and scheduler know the same tasks. `enqueue`
submits a job through jobs.client (validation, backpressure, the outbox:
published when the caller's transaction commits) and returns its
TaskResult; the Celery workers run it under the platform's time limits,
retries with backoff, retry budget, memory guard and poison rules.

Per-task policy: `@task(policy={"max_attempts": 3, "soft_time_limit": 60})`
(a jobs.policy.Policy's fields; Django passes a backend's extra decorator
arguments to its task class) and JOBS_KIND_OVERRIDES under the task's name.
Priority −100…100 (higher first) maps onto Celery's 0…9 (0 first):
`(100 - priority) * 9 // 200`, so 100 → 0, 0 → 4, −100 → 9. `queue_name`
must be one of JOBS_QUEUES. Arguments must be JSON: anything else is
refused at enqueue by Django's own TaskResult (TypeError/ValueError).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core import checks

from jobs import client
from jobs.kinds import registry
from jobs.policy import Policy
from jobs.taskbackend.compat import (
    TASK_MAX_PRIORITY,
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultStatus,
    task_enqueued,
)
from jobs.taskbackend.kind import MAX_NAME_CHARS, TaskKind
from jobs.taskbackend.results import result_for, task_result


def platform_priority(priority: int) -> int:
    """Django's task priority (−100…100, higher first) as Celery's (0…9, 0 first)."""
    return (TASK_MAX_PRIORITY - priority) * 9 // 200


@dataclass(frozen=True, slots=True, kw_only=True)
class JobsTask(Task):
    """Django's Task with the platform's policy (`policy`: Policy fields to change)."""

    policy: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        Task.__post_init__(self)  # validates through the backend
        if len(self.module_path) > MAX_NAME_CHARS:
            raise InvalidTask(
                f"task path {self.module_path!r} is longer than {MAX_NAME_CHARS} characters "
                "(a job kind's name)"
            )
        try:
            policy = Policy().with_overrides(dict(self.policy or {}))
        except (TypeError, ValueError) as exc:
            raise InvalidTask(f"invalid policy for {self.module_path}: {exc}") from exc
        registry.register_instance(TaskKind(self, policy=policy), origin=self.module_path)


class JobsBackend(BaseTaskBackend):
    """Runs Django tasks as platform jobs (module docstring)."""

    task_class = JobsTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        # Django checks queue_name against these; the platform's queues unless narrowed.
        self.queues = set(params.get("QUEUES") or settings.JOBS_QUEUES)

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Submit `task(*args, **kwargs)` as a job; returns its TaskResult (status READY).

        Raises Django's InvalidTask (the task), TypeError/ValueError (arguments
        that are not JSON, from Django's TaskResult) and the platform's
        client errors (InvalidSubmission, QueueFull).
        """
        self.validate_task(task)
        # Django's TaskResult normalises (and refuses) the arguments first.
        draft: TaskResult[Any] = TaskResult(
            task=task,
            id="",
            status=TaskResultStatus.READY,
            enqueued_at=None,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        job = client.submit(
            task.module_path,
            {"args": draft.args, "kwargs": draft.kwargs},
            queue=task.queue_name,
            priority=platform_priority(task.priority),
            run_after=task.run_after,
        )
        result = task_result(job, task)
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        """The job's TaskResult, read from the database. Raises TaskResultDoesNotExist."""
        return result_for(result_id)

    def check(self, **kwargs: Any) -> Iterable[checks.CheckMessage]:
        unknown = sorted(set(self.queues) - set(settings.JOBS_QUEUES))
        if unknown:
            yield checks.Error(
                f"TASKS[{self.alias!r}]['QUEUES'] names queues the platform does not have: "
                f"{', '.join(unknown)}",
                hint="Use names from JOBS_QUEUES.",
                id="jobs.E014",
            )
