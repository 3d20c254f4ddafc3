"""Cancel and requeue, for the API and the admin."""

from __future__ import annotations

import logging
import uuid

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from jobs.errors import InvalidTransition
from jobs.kinds import policy_for
from jobs.models import Job, JobStatus
from jobs.services.attempts import _completed
from jobs.services.submission import job_publish

logger = logging.getLogger(__name__)


def job_cancel(*, job_id: uuid.UUID | str) -> Job:
    """Cancel a non-terminal job.

    A queued or retrying job never starts. A running attempt gets its
    cancellation flag (through Redis, see jobs.supervisor) and is aborted
    JOBS_ABORT_GRACE seconds later if it ignores it. Raises Job.DoesNotExist,
    or InvalidTransition when the job is terminal.
    """
    with transaction.atomic():
        job = Job.objects.select_for_update().get(id=job_id)
        if job.is_terminal:
            raise InvalidTransition(
                f"job is {job.status}; only queued, retrying or running jobs can be cancelled"
            )
        was_running = job.status == JobStatus.RUNNING
        job.status = JobStatus.CANCELLED
        job.finished_at = timezone.now()
        job.next_attempt_at = None
        job.lease_expires_at = None
        job.save(update_fields=["status", "finished_at", "next_attempt_at", "lease_expires_at"])
        _completed(job)
        if was_running:
            transaction.on_commit(lambda: _signal_cancel(job.id))
    logger.info("job cancelled job_id=%s kind=%s was_running=%s", job.id, job.kind, was_running)
    return job


def _signal_cancel(job_id: uuid.UUID) -> None:
    from jobs.broker import broker_client
    from jobs.supervisor import cancel_key

    try:
        broker_client().set(cancel_key(job_id), "1", ex=settings.JOBS_CANCEL_TTL)
    except Exception as exc:  # the job is cancelled either way; the attempt runs to its limit
        logger.warning("could not signal cancellation job_id=%s: %s", job_id, exc)


def job_requeue(*, job_id: uuid.UUID | str) -> Job:
    """Give a dead job a fresh set of attempts and queue it again.

    Raises Job.DoesNotExist, or InvalidTransition unless the job is dead.
    """
    with transaction.atomic():
        job = Job.objects.select_for_update().get(id=job_id)
        if job.status != JobStatus.DEAD:
            raise InvalidTransition(f"job is {job.status}; only dead jobs can be requeued")
        job.status = JobStatus.QUEUED
        job.max_attempts = job.attempts_made + policy_for(job.kind).max_attempts
        job.worker_losses = 0  # a fresh set of attempts gets a fresh poison count
        job.dead_reason = ""
        job.finished_at = None
        job.enqueued_at = timezone.now()
        job.published_at = None
        job.save(
            update_fields=[
                "status",
                "max_attempts",
                "worker_losses",
                "dead_reason",
                "finished_at",
                "enqueued_at",
                "published_at",
            ]
        )
        transaction.on_commit(lambda: job_publish(job_id=job.id))
    logger.info("job requeued job_id=%s kind=%s", job.id, job.kind)
    return job
