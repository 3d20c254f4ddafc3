"""A worker child died running an attempt: recorded from its main process, a redelivery or a sweep."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now

from jobs import clock
from jobs.decisions import Action, Decision, decide
from jobs.kinds import policy_for
from jobs.models import Attempt, AttemptOutcome, Job, JobStatus
from jobs.services.attempt_close import close_attempt, job_completed, log_decision
from jobs.services.records import AttemptEnd, AttemptReport

logger = logging.getLogger(__name__)


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
    now = clock.now()
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(id=job_id).first()
        if job is None:
            return AttemptEnd(status=None)
        row = job.attempts.filter(number=job.attempts_made).first()
        ours = (
            row is not None
            and row.finished_at is None
            and (row.worker_pid == worker_pid if worker_pid else row.number >= attempt)
        )
        if job.status == JobStatus.RUNNING and ours and row is not None:
            decision = record_worker_lost(job, row, now=now, requeued=True, message=message)
            return AttemptEnd(
                status=job.status,
                job_status=job.status,
                decision=decision,
                outcome=AttemptOutcome.WORKER_LOST,
                attempt=row.number,
                max_attempts=job.max_attempts,
            )
        if job.status == JobStatus.QUEUED:
            # A child lost before its attempt started: Celery puts the message
            # back on the queue; its publish time is now, so the lost-message
            # check does not take it for a vanished one.
            Job.objects.filter(id=job.id, status=JobStatus.QUEUED).update(published_at=Now())
        return AttemptEnd(status=None, job_status=job.status)


def record_worker_lost(
    job: Job, row: Attempt, *, now: datetime, requeued: bool, message: str
) -> Decision:
    """Close attempt `row` as worker_lost and apply the decision (job row locked by the caller).

    jobs.decisions.decide: dead "poison" once JOBS_POISON_AFTER attempts
    were lost, dead "exhausted" when no attempts remain, otherwise queued
    again at once. `requeued` says the broker still holds a message for the
    job (Celery requeued it), so nothing must be published. Returns the
    decision.
    """
    job.worker_losses += 1
    job.lease_expires_at = None
    job.last_error = f"WorkerLostError: {message}"[:10_000]
    decision = decide(
        policy=policy_for(job.kind),
        outcome=AttemptOutcome.WORKER_LOST,
        retryable=True,
        attempts_made=job.attempts_made,
        max_attempts=job.max_attempts,
        worker_losses=job.worker_losses,
        poison_after=settings.JOBS_POISON_AFTER,
    )
    close_attempt(
        row,
        AttemptReport(
            outcome=AttemptOutcome.WORKER_LOST, error_type="WorkerLostError", error_message=message
        ),
        now=now,
        decision=decision,
    )
    if decision.action == Action.DEAD:
        job.status, job.dead_reason, job.finished_at = JobStatus.DEAD, decision.dead_reason, now
    else:
        job.status = JobStatus.QUEUED
        job.enqueued_at = now
        # The message goes back on the queue now: stamped on the database's
        # clock, like every publish (jobs.services.lost_messages compares them).
        job.published_at = Now() if requeued else None
    job.save(
        update_fields=[
            "status",
            "dead_reason",
            "finished_at",
            "worker_losses",
            "lease_expires_at",
            "last_error",
            "enqueued_at",
            "published_at",
        ]
    )
    if job.is_terminal:
        job_completed(job)
    log_decision(job, row.number, AttemptOutcome.WORKER_LOST, decision, job.last_error)
    return decision
