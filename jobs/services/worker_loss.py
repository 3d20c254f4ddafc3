"""A worker child died running an attempt (a façade over the engine: jobs.engine.Engine.lose)."""

from __future__ import annotations

import uuid

from jobs import engine
from jobs.engine.values import AttemptEnd, Loss


def attempt_worker_lost(
    *, job_id: uuid.UUID | str, attempt: int, worker_pid: int | None, message: str
) -> AttemptEnd:
    """Record, from the worker's main process, that the child `worker_pid` died running this job.

    `attempt` is the number the message was first published for; a
    requeued message runs later attempts, so the lost attempt is the job's
    current one when it is unfinished and ran in `worker_pid` (or, with no
    pid known, when its number is not below `attempt`).

    The returned AttemptEnd's `decision` is None when nothing was recorded
    (the job is gone, or its current attempt is not this child's). Its
    `requeue` answer for Celery is `AttemptEnd.status == "queued"` or, when
    nothing was recorded, "the job is not terminal": the message goes back
    on the queue (reject_on_worker_lost) unless the job is dead or
    terminal, where a redelivery could only loop.
    """
    loss = Loss(job_id=job_id, attempt=attempt, worker_pid=worker_pid, message=message)
    return engine.current().lose(loss)
