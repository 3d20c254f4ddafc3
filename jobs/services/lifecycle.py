"""Cancel, requeue and retry-now, for the API, the admin and background bulk actions.

The row changes are the engine's (jobs.engine.lifecycle); here the use
case around them: publishing, the cancellation signal, History and logs.

Each takes an optional `actor` (the user asking) and `via` (where the
request came from: "admin", "API", ...); with an actor, the change is also
recorded in the job's admin History (jobs.services.audit).

The attempt budget (README "Requeue and the attempt budget"): `max_attempts`
is the total number of attempts a job may make. A requeue or a retry-now of
a dead job runs it again with the attempts it has left, and at least one:
`max_attempts` becomes `max(max_attempts, attempts_made + 1)`. A job that
died exhausted (5 of 5) gets exactly one more attempt (5 -> 6): if that
fails, it is dead again. A job that died early (a non-retryable error after
2 of 5, poison after 3 losses) keeps the attempts it had left. Nothing
doubles the budget (an earlier version set `attempts_made + the kind's
max_attempts`, turning 5 into 10 without saying so).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.db import transaction

from jobs import engine
from jobs.cancellation import cancel_request
from jobs.engine.lifecycle import requeue_max_attempts
from jobs.engine.values import JobRef, Moved
from jobs.models import Job, JobStatus
from jobs.services.audit import job_action_record
from jobs.services.publishing import job_publish

logger = logging.getLogger(__name__)

__all__ = ["job_cancel", "job_requeue", "job_retry_now", "requeue_max_attempts"]


def job_cancel(*, job_id: uuid.UUID | str, actor: Any = None, via: str = "API") -> Job:
    """Cancel a non-terminal job.

    A queued or retrying job never starts. A running attempt gets its
    cancellation flag (through the state store, see jobs.cancellation) and is aborted
    JOBS_ABORT_GRACE seconds later if it ignores it. Raises Job.DoesNotExist,
    or InvalidTransition when the job is terminal.
    """
    with transaction.atomic():
        moved = engine.current().cancel(JobRef(job_id))
        job, was = moved.job, moved.was
        if was == JobStatus.RUNNING:
            transaction.on_commit(lambda: _signal_cancel(job.id))
        job_action_record(job=job, actor=actor, message=f"Cancelled via {via}: {was} → cancelled.")
    logger.info("job cancelled job_id=%s kind=%s was=%s via=%s", job.id, job.kind, was, via)
    return job


def _signal_cancel(job_id: uuid.UUID) -> None:

    try:
        cancel_request(job_id)
    except Exception as exc:  # the job is cancelled either way; the attempt runs to its limit
        logger.warning("could not signal cancellation job_id=%s: %s", job_id, exc)


def _requeued(moved: Moved, *, actor: Any, verb: str, via: str) -> None:
    """Publish a job queued again from the dead-letter set, and say so in its History."""
    job, before = moved.job, moved.max_attempts_before
    left = job.max_attempts - job.attempts_made
    budget = (
        f"max attempts {before} → {job.max_attempts} (one more attempt)"
        if job.max_attempts != before
        else f"max attempts stays {before} ({left} attempt{'s' if left != 1 else ''} left)"
    )
    transaction.on_commit(lambda: job_publish(job_id=job.id))
    job_action_record(
        job=job,
        actor=actor,
        message=f"{verb} via {via}: dead ({moved.reason}) → queued; "
        f"{job.attempts_made} attempts made, {budget}.",
    )


def job_requeue(*, job_id: uuid.UUID | str, actor: Any = None, via: str = "API") -> Job:
    """Queue a dead job again with the attempts it has left, and at least one (module docstring).

    The poison count (`worker_losses`) starts again. Raises Job.DoesNotExist,
    or InvalidTransition unless the job is dead.
    """
    with transaction.atomic():
        moved = engine.current().requeue(JobRef(job_id))
        _requeued(moved, actor=actor, verb="Requeued", via=via)
    job = moved.job
    logger.info(
        "job requeued job_id=%s kind=%s max_attempts=%s via=%s",
        job.id,
        job.kind,
        job.max_attempts,
        via,
    )
    return job


def job_retry_now(*, job_id: uuid.UUID | str, actor: Any = None, via: str = "API") -> Job:
    """Run the job's next attempt now.

    A retrying job skips the rest of its backoff (its budget is unchanged:
    the attempt was already allowed). A dead job is requeued (job_requeue's
    budget rule). Raises Job.DoesNotExist, or InvalidTransition for any
    other status.
    """
    with transaction.atomic():
        moved = engine.current().retry_now(JobRef(job_id))
        job = moved.job
        if moved.was == JobStatus.DEAD:
            _requeued(moved, actor=actor, verb="Retried now", via=via)
        else:
            due, enqueued = moved.due, job.enqueued_at
            wait = (
                f", {max(0.0, (due - enqueued).total_seconds()):.1f} s early"
                if due and enqueued
                else ""
            )
            transaction.on_commit(lambda: job_publish(job_id=job.id))
            job_action_record(
                job=job,
                actor=actor,
                message=f"Retried now via {via}: retrying → queued{wait}; "
                f"attempt {job.attempts_made + 1} of {job.max_attempts}.",
            )
    logger.info("job retried now job_id=%s kind=%s via=%s", job.id, job.kind, via)
    return job
