"""The fresh app's Django task: `tests.byow_app.tasks.work`, run as a platform job.

Plain Django Tasks code: the decorator is Django's (django.tasks on 6.x,
the django-tasks backport on 5.2); `policy` is the platform's extra
decorator argument (jobs.taskbackend.JobsTask).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the backport's decorator takes a backend's extra arguments, as 6.1's does
    from django_tasks import task
else:
    try:
        from django.tasks import task
    except ImportError:  # Django 5.2: the backport
        from django_tasks import task


@task(
    takes_context=True,
    policy={
        "max_attempts": 3,
        "soft_time_limit": 2,
        "hard_time_limit": 4,
        "backoff_base": 0.3,
        "backoff_floor": 0.2,
        "backoff_cap": 1.0,
    },
)
def work(
    context: Any, fail_times: int = 0, sleep_seconds: float = 0, ignore_cancel: bool = False
) -> dict[str, Any]:
    """Fails its first `fail_times` attempts (ConnectionError), sleeps, returns its attempt."""
    deadline = time.monotonic() + sleep_seconds
    while time.monotonic() < deadline:
        try:
            if not ignore_cancel:
                context.job.raise_if_cancelled()
            time.sleep(0.05)
        except BaseException:  # noqa: B036 - the soft limit and the abort too: only the hard limit ends it
            if not ignore_cancel:
                raise
    if context.attempt <= fail_times:
        raise ConnectionError(f"transient failure {context.attempt} of {fail_times}")
    return {"attempt": context.attempt, "worker": context.task_result.worker_ids[-1]}


@task()
def add(a: int, b: int) -> int:
    """Django's documentation example, unchanged."""
    return a + b
