"""The Celery task that runs one attempt. Thin: the runner and services do the work.

A retry never waits inside the worker as a delayed Celery message: it waits in
the database and the scheduler publishes it when due (DESIGN.md "Retries").
"""

from __future__ import annotations

import logging
from typing import Any

from billiard.einfo import ExceptionInfo
from billiard.exceptions import WorkerLostError
from celery import Task
from celery.exceptions import TimeLimitExceeded
from celery.worker.request import Request
from celery.worker.state import task_ready

from config.celery_app import app
from jobs import runner, services
from jobs.models import AttemptOutcome, Job

logger = logging.getLogger(__name__)


class AttemptRequest(Request):
    """Worker-side request that records a lost child and caps redeliveries.

    Runs in the worker's main process. With `reject_on_worker_lost`, Celery
    requeues a message whose child died, forever (celery issues 9082 and
    1628). Here the loss is recorded first; once the job is dead (poison
    cap or attempts exhausted) the message is acknowledged instead.
    """

    def on_failure(
        self, exc_info: ExceptionInfo, send_failed_event: bool = True, return_ok: bool = False
    ) -> None:
        exc = getattr(exc_info, "exception", None)
        exc = getattr(exc, "exc", exc)
        if (
            isinstance(exc, WorkerLostError | SystemExit | KeyboardInterrupt)
            and len(self.args) >= 2
        ):
            try:
                requeue = services.attempt_worker_lost(
                    job_id=self.args[0],
                    attempt=int(self.args[1]),
                    worker_pid=self.worker_pid,
                    message=f"worker lost: {exc}",
                )
            except Exception:
                logger.exception("could not record worker loss job_id=%s", self.args[0])
                requeue = True
            if not requeue:
                logger.warning(
                    "poison or exhausted job_id=%s: acknowledging instead of requeueing",
                    self.args[0],
                )
                # Celery's own on_failure starts with task_ready(); without it the
                # request stays "active" forever (inspect active, tasks_active).
                task_ready(self)
                self.acknowledge()
                return None
        return super().on_failure(
            exc_info, send_failed_event=send_failed_event, return_ok=return_ok
        )


class AttemptTask(Task):
    """Records a hard time limit, which kills the child before it can record anything.

    Celery 5.7 calls `on_failure` in the worker's main process for a hard
    time limit (celery/worker/request.py, Request.on_timeout).
    """

    Request = AttemptRequest

    def on_failure(
        self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any
    ) -> None:
        if isinstance(exc, TimeLimitExceeded) and len(args) >= 2:
            # A message redelivered after a worker loss runs a later attempt
            # than it was published for: record the job's current attempt.
            current = Job.objects.filter(id=args[0]).values_list("attempts_made", flat=True).first()
            status = services.attempt_interrupted(
                job_id=args[0],
                attempt=max(int(args[1]), current or 0),
                outcome=AttemptOutcome.HARD_TIMEOUT,
                message=f"hard time limit exceeded ({exc})",
            )
            logger.warning(
                "attempt hit hard time limit job_id=%s attempt=%s status=%s",
                args[0],
                args[1],
                status,
            )


# Bound to our app, not `shared_task`: a shared task publishes through the
# process's *current* app, which any other `Celery()` made in the process
# (a library, a test's inspection client) silently replaces.
@app.task(
    name="jobs.run_attempt",
    base=AttemptTask,
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
)
def run_attempt_task(self: Task, job_id: str, attempt: int) -> str | None:
    """Run the attempt this message was published for (1-based); returns the job's status or None if dropped."""
    return runner.execute_attempt(
        job_id=job_id, attempt=int(attempt), hostname=self.request.hostname or ""
    )
