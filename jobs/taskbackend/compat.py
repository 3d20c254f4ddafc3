"""Django's Tasks framework: `django.tasks` (Django 6.0+) or the `django-tasks` backport (5.2).

One import site for the names jobs.taskbackend uses, so the rest of the
package reads the same on both. The exception raised for an invalid task is
`InvalidTask` on 6.x and `InvalidTaskError` in the backport; both are
`InvalidTask` here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # one module for mypy: the backport, installed with Django 5.2
    from django_tasks import (
        DEFAULT_TASK_QUEUE_NAME,
        TaskContext,
        TaskResult,
        TaskResultStatus,
        task_backends,
    )
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import (
        TASK_MAX_PRIORITY,
        TASK_MIN_PRIORITY,
        Task,
        TaskError,
    )
    from django_tasks.exceptions import (
        InvalidTaskError as InvalidTask,
    )
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import (
        task_enqueued,
        task_finished,
        task_started,
    )
    from django_tasks.utils import normalize_json
else:
    try:  # Django 6.0+
        from django.tasks import (
            DEFAULT_TASK_QUEUE_NAME,
            Task,
            TaskContext,
            TaskResult,
            TaskResultStatus,
            task_backends,
        )
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import TASK_MAX_PRIORITY, TASK_MIN_PRIORITY, TaskError
        from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued, task_finished, task_started
        from django.utils.json import normalize_json
    except ImportError:  # Django 5.2 with the backport
        from django_tasks import (
            DEFAULT_TASK_QUEUE_NAME,
            TaskContext,
            TaskResult,
            TaskResultStatus,
            task_backends,
        )
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import (
            TASK_MAX_PRIORITY,
            TASK_MIN_PRIORITY,
            Task,
            TaskError,
        )
        from django_tasks.exceptions import (
            InvalidTaskError as InvalidTask,
        )
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import (
            task_enqueued,
            task_finished,
            task_started,
        )
        from django_tasks.utils import normalize_json

__all__ = [
    "DEFAULT_TASK_QUEUE_NAME",
    "TASK_MAX_PRIORITY",
    "TASK_MIN_PRIORITY",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
