"""A Django task as a job kind: its dotted path is the kind's name, its arguments the payload.

The payload is `{"args": [...], "kwargs": {...}}` as Django's TaskResult
normalised them (JSON only). The policy is the platform's default Policy,
changed by the decorator's `policy={...}` (jobs.taskbackend.backend.JobsTask)
and by JOBS_KIND_OVERRIDES under the task's name, like any kind.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from jobs.kinds.base import AttemptContext, Kind, PermanentError
from jobs.policy import Policy
from jobs.taskbackend.compat import Task, normalize_json
from jobs.taskbackend.results import context_for

# Job.kind's max_length: a task whose dotted path is longer cannot be a kind.
MAX_NAME_CHARS = 100


class TaskPayload(serializers.Serializer):
    args = serializers.ListField(child=serializers.JSONField(), default=list)
    kwargs = serializers.DictField(child=serializers.JSONField(), default=dict)


class TaskKind(Kind):
    """The kind of one Django task (one per task function, registered when it is decorated)."""

    payload_serializer = TaskPayload

    def __init__(self, task: Task, *, policy: Policy) -> None:
        self.task = task
        self.name = task.module_path  # type: ignore[misc]
        self.origin = task.module_path
        self.policy = policy  # type: ignore[misc]
        self.queue = task.queue_name  # type: ignore[misc]

    def run(self, payload: dict[str, Any], ctx: AttemptContext) -> Any:
        """Call the task function (with a JobsTaskContext first when it takes context)."""
        args, kwargs = payload.get("args", []), payload.get("kwargs", {})
        if self.task.takes_context:
            value = self.task.call(context_for(self.task, ctx), *args, **kwargs)
        else:
            value = self.task.call(*args, **kwargs)
        try:
            return normalize_json(value)
        except (TypeError, ValueError) as exc:  # as Django's own backends refuse it
            raise PermanentError(f"return value is not JSON: {exc}") from exc
