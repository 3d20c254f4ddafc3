"""The Celery task that runs one attempt. Thin: the runner and services do the work.

Never `Task.retry()`, never a countdown or ETA: a retry waits in the
database and the scheduler publishes it when due (DESIGN.md "Retries").
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Task, shared_task
from celery.exceptions import TimeLimitExceeded

from jobs import runner, services
from jobs.models import AttemptOutcome

logger = logging.getLogger(__name__)


class AttemptTask(Task):
    """Records a hard time limit, which kills the child before it can record anything.

    Celery 5.7 calls `on_failure` in the worker's main process for a hard
    time limit (celery/worker/request.py, Request.on_timeout).
    """

    def on_failure(
        self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any
    ) -> None:
        if isinstance(exc, TimeLimitExceeded) and len(args) >= 2:
            status = services.attempt_interrupted(
                job_id=args[0],
                attempt=int(args[1]),
                outcome=AttemptOutcome.HARD_TIMEOUT,
                message=f"hard time limit exceeded ({exc})",
            )
            logger.warning(
                "attempt hit hard time limit job_id=%s attempt=%s status=%s",
                args[0],
                args[1],
                status,
            )


@shared_task(
    name="jobs.run_attempt",
    base=AttemptTask,
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
)
def run_attempt_task(self: Task, job_id: str, attempt: int) -> str | None:
    """Run attempt `attempt` (1-based) of job `job_id`; returns the job's status or None if dropped."""
    return runner.execute_attempt(
        job_id=job_id, attempt=int(attempt), hostname=self.request.hostname or ""
    )
