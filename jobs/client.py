"""The public Python API: submit, read, cancel and requeue jobs from your own code.

The HTTP API (jobs.api.views) is a thin caller of these functions, so both
apply the same validation, ownership (jobs.ownership), backpressure and
errors (jobs.errors):

    from jobs import client
    job = client.submit("report.csv_summary", {"path": "sales.csv"}, submitter=request.user)
    client.get(job.id, user=request.user).status

Transactions: called inside `transaction.atomic()`, `submit` writes the job
row in that transaction and publishes its message only when it commits (the
outbox, jobs.services.submission); a rollback leaves neither row nor
message. Called outside one (autocommit), the row is committed by its own
INSERT and the message published at once, before `submit` returns. Either
way a publish the broker refuses leaves the row queued for the scheduler's
outbox sweep: an accepted job is never lost.

Users: `submitter` / `user` is the person the call acts for (the request's
user). `submitter=None` records a job without a submitter (idempotency keys
are then scoped to submitter-less jobs). `user=None` is trusted code acting
as the platform (a management command, a Django task): no ownership rule
applies. Pass the request's user to have the API's rules applied.

Errors: InvalidSubmission (400 in the API; `.errors` maps field paths to
reasons), IdempotencyConflict (409), QueueFull (503, `.retry_after`
seconds), JobNotFound (404, also for a job the user may not see),
ActionNotPermitted (403), InvalidTransition (409).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from jobs import clock, selectors, services
from jobs.engine.values import SubmitResult
from jobs.errors import (
    ActionNotPermitted,
    IdempotencyConflict,
    InvalidSubmission,
    InvalidTransition,
    JobNotFound,
    QueueFull,
)
from jobs.models import Job, JobStatus

__all__ = [
    "ActionNotPermitted",
    "IdempotencyConflict",
    "InvalidSubmission",
    "InvalidTransition",
    "Job",
    "JobNotFound",
    "JobStatus",
    "QueueFull",
    "SubmitResult",
    "cancel",
    "get",
    "requeue",
    "submit",
    "submit_result",
]


def submit(
    kind: str,
    payload: dict[str, Any],
    *,
    idempotency_key: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
    run_after: datetime | timedelta | None = None,
    submitter: Any = None,
) -> Job:
    """Record a job of `kind` and publish it (on commit inside a transaction; module docstring).

    `priority`: 0 (taken first) to 9 (last), None for none. `run_after`: the
    earliest start, an aware datetime or a delay from now; a later one makes
    the job `delayed` in the database until the scheduler queues it.
    `idempotency_key`: a second submit with the same key, kind and submitter
    returns the first job (same request) or raises IdempotencyConflict.
    Returns the Job (status queued or delayed; an existing job for a
    repeated key). Raises InvalidSubmission, IdempotencyConflict, QueueFull.
    """
    return submit_result(
        kind,
        payload,
        idempotency_key=idempotency_key,
        queue=queue,
        priority=priority,
        run_after=run_after,
        submitter=submitter,
    ).job


def submit_result(
    kind: str,
    payload: dict[str, Any],
    *,
    idempotency_key: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
    run_after: datetime | timedelta | None = None,
    submitter: Any = None,
) -> SubmitResult:
    """submit, also saying whether the job was made now (`created`) or found by its key."""
    if isinstance(run_after, timedelta):
        run_after = clock.now() + run_after
    return services.job_submit(
        kind=kind,
        payload=payload,
        queue=queue,
        priority=priority,
        idempotency_key=idempotency_key,
        user=submitter,
        run_after=run_after,
    )


def get(job_id: uuid.UUID | str, *, user: Any = None) -> Job:
    """The job with its attempts prefetched. Raises JobNotFound (also when `user` may not see it)."""
    if user is None:
        job = selectors.job_get(job_id=job_id)
    else:
        job = selectors.job_get_for(user=user, job_id=job_id)
    if job is None:
        raise JobNotFound()
    return job


def cancel(job_id: uuid.UUID | str, *, user: Any = None, via: str = "Python API") -> Job:
    """Cancel a queued, delayed, retrying or running job (a running attempt is asked to stop).

    Raises JobNotFound, ActionNotPermitted or InvalidTransition (already terminal).
    """
    if user is None:
        return _system(services.job_cancel, job_id, via)
    return services.job_cancel_for(user=user, job_id=job_id, via=via)


def requeue(job_id: uuid.UUID | str, *, user: Any = None, via: str = "Python API") -> Job:
    """Queue a dead job again with the attempts it has left, and at least one.

    Raises JobNotFound, ActionNotPermitted or InvalidTransition (not dead).
    """
    if user is None:
        return _system(services.job_requeue, job_id, via)
    return services.job_requeue_for(user=user, job_id=job_id, via=via)


def _system(service: Any, job_id: uuid.UUID | str, via: str) -> Job:
    try:
        return service(job_id=uuid.UUID(str(job_id)), actor=None, via=via)
    except (Job.DoesNotExist, ValueError):
        raise JobNotFound() from None
