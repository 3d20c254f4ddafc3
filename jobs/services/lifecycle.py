"""Cancel, requeue and retry-now, for the API, the admin and background bulk actions.

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

from jobs import selectors, waiting
from jobs.cancellation import cancel_request
from jobs.errors import InvalidTransition
from jobs.models import Job, JobStatus
from jobs.services.attempt_close import job_completed
from jobs.services.audit import job_action_record
from jobs.services.submission import job_publish

logger = logging.getLogger(__name__)


def requeue_max_attempts(*, attempts_made: int, max_attempts: int) -> int:
    """The `max_attempts` a dead job gets when requeued: the attempts it has left, at least one."""
    return max(max_attempts, attempts_made + 1)


def job_cancel(*, job_id: uuid.UUID | str, actor: Any = None, via: str = "API") -> Job:
    """Cancel a non-terminal job.

    A queued or retrying job never starts. A running attempt gets its
    cancellation flag (through the state store, see jobs.cancellation) and is aborted
    JOBS_ABORT_GRACE seconds later if it ignores it. Raises Job.DoesNotExist,
    or InvalidTransition when the job is terminal.
    """
    with transaction.atomic():
        job = Job.objects.select_for_update().get(id=job_id)
        if job.is_terminal:
            raise InvalidTransition(
                f"job is {job.status}; only queued, delayed, retrying or running jobs can be cancelled"
            )
        was = job.status
        job.status = JobStatus.CANCELLED
        job.finished_at = selectors.database_now()
        job.next_attempt_at = None
        job.lease_expires_at = None
        job.save(
            update_fields=[
                "status",
                "finished_at",
                "next_attempt_at",
                "lease_expires_at",
                *waiting.apply(job, None),
            ]
        )
        job_completed(job)
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


def _queue_now(job: Job, fields: list[str]) -> None:
    """Queue the locked `job` for its next attempt now; publish when the transaction commits."""
    job.status = JobStatus.QUEUED
    job.next_attempt_at = None
    job.enqueued_at = selectors.database_now()
    job.published_at = None
    job.save(
        update_fields=[
            "status",
            "next_attempt_at",
            "enqueued_at",
            "published_at",
            *waiting.apply(job, None),
            *fields,
        ]
    )
    transaction.on_commit(lambda: job_publish(job_id=job.id))


def _requeue_locked(job: Job, *, actor: Any, verb: str, via: str) -> None:
    before = job.max_attempts
    reason = job.dead_reason or "unknown reason"
    job.max_attempts = requeue_max_attempts(
        attempts_made=job.attempts_made, max_attempts=job.max_attempts
    )
    job.worker_losses = 0  # the poison count starts again
    job.dead_reason = ""
    job.finished_at = None
    _queue_now(job, ["max_attempts", "worker_losses", "dead_reason", "finished_at"])
    left = job.max_attempts - job.attempts_made
    budget = (
        f"max attempts {before} → {job.max_attempts} (one more attempt)"
        if job.max_attempts != before
        else f"max attempts stays {before} ({left} attempt{'s' if left != 1 else ''} left)"
    )
    job_action_record(
        job=job,
        actor=actor,
        message=f"{verb} via {via}: dead ({reason}) → queued; "
        f"{job.attempts_made} attempts made, {budget}.",
    )


def job_requeue(*, job_id: uuid.UUID | str, actor: Any = None, via: str = "API") -> Job:
    """Queue a dead job again with the attempts it has left, and at least one (module docstring).

    The poison count (`worker_losses`) starts again. Raises Job.DoesNotExist,
    or InvalidTransition unless the job is dead.
    """
    with transaction.atomic():
        job = Job.objects.select_for_update().get(id=job_id)
        if job.status != JobStatus.DEAD:
            raise InvalidTransition(f"job is {job.status}; only dead jobs can be requeued")
        _requeue_locked(job, actor=actor, verb="Requeued", via=via)
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
        job = Job.objects.select_for_update().get(id=job_id)
        if job.status == JobStatus.RETRYING:
            due = job.next_attempt_at
            _queue_now(job, [])
            enqueued = job.enqueued_at
            wait = (
                f", {max(0.0, (due - enqueued).total_seconds()):.1f} s early"
                if due and enqueued
                else ""
            )
            job_action_record(
                job=job,
                actor=actor,
                message=f"Retried now via {via}: retrying → queued{wait}; "
                f"attempt {job.attempts_made + 1} of {job.max_attempts}.",
            )
        elif job.status == JobStatus.DEAD:
            _requeue_locked(job, actor=actor, verb="Retried now", via=via)
        else:
            raise InvalidTransition(
                f"job is {job.status}; only dead or retrying jobs can be retried now"
            )
    logger.info("job retried now job_id=%s kind=%s via=%s", job.id, job.kind, via)
    return job
