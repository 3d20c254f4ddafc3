"""Job transitions outside an attempt: cancel, requeue, retry now, and the scheduler's sweeps.

The same on every backend (the ORM, the job row locked). Each returns what
the caller needs to act after commit (publish, signal a cancellation,
record History: jobs.services); events go into the `Effects` passed in.

The attempt budget (README "Requeue and the attempt budget"): a requeue or
a retry-now of a dead job runs it again with the attempts it has left, and
at least one (`requeue_max_attempts`); nothing doubles the budget.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from jobs import clock, events, outbox_claim, selectors
from jobs.engine import changes
from jobs.engine.backends.orm import OrmBackend
from jobs.engine.values import Effects, JobRef, Moved, Sweep
from jobs.errors import InvalidTransition
from jobs.models import Job, JobStatus


def requeue_max_attempts(*, attempts_made: int, max_attempts: int) -> int:
    """The `max_attempts` a dead job gets when requeued: the attempts it has left, at least one."""
    return max(max_attempts, attempts_made + 1)


def _locked(ref: JobRef) -> Job:
    return Job.objects.select_for_update().get(id=ref.job_id)


def cancel(ref: JobRef, *, effects: Effects) -> Moved:
    """Cancel a non-terminal job. Raises Job.DoesNotExist, or InvalidTransition when terminal."""
    with transaction.atomic():
        job = _locked(ref)
        if job.is_terminal:
            raise InvalidTransition(
                f"job is {job.status}; only queued, delayed, retrying or running jobs can be cancelled"
            )
        was = job.status
        job.save(update_fields=changes.apply(job, changes.cancelled(now=selectors.database_now())))
    effects.send(events.job_completed, job=job)
    if was == JobStatus.RUNNING:
        effects.slot_freed(job)
    return Moved(job=job, was=was)


def drop(ref: JobRef, *, attempt: int, effects: Effects) -> Job | None:
    """End a queued job `dead` (reason delivery_limit) if it still waits for `attempt`,
    whose message the broker dropped; returns it, or None when anything moved it on
    since (a start, a requeue, a republish that already ran)."""
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(id=ref.job_id, status=JobStatus.QUEUED).first()
        if job is None or job.attempts_made + 1 != attempt:
            return None
        job.save(update_fields=changes.apply(job, changes.dropped_by_broker(now=clock.now())))
    effects.send(events.job_completed, job=job)
    return job


def requeue(ref: JobRef, *, effects: Effects, retrying_too: bool = False) -> Moved:
    """Queue a dead job again with the attempts it has left (module docstring); with
    `retrying_too`, also a retrying job now (its budget unchanged: retry now).
    Raises Job.DoesNotExist, or InvalidTransition for any other status."""
    with transaction.atomic():
        job = _locked(ref)
        was, due, before = job.status, job.next_attempt_at, job.max_attempts
        reason = job.dead_reason or "unknown reason"
        now = selectors.database_now()
        if job.status == JobStatus.DEAD:
            budget = requeue_max_attempts(attempts_made=job.attempts_made, max_attempts=before)
            columns = changes.requeued(now=now, max_attempts=budget)
        elif job.status == JobStatus.RETRYING and retrying_too:
            columns = changes.queued(now=now)
        elif retrying_too:
            raise InvalidTransition(
                f"job is {job.status}; only dead or retrying jobs can be retried now"
            )
        else:
            raise InvalidTransition(f"job is {job.status}; only dead jobs can be requeued")
        job.save(update_fields=changes.apply(job, columns))
    return Moved(job=job, was=was, due=due, max_attempts_before=before, reason=reason)


def promote_due(sweep: Sweep) -> list[uuid.UUID]:
    """Move due `retrying` and `delayed` jobs to `queued`; returns their ids (to publish).

    The rows are claimed for `sweep.claimer` in the same UPDATE, so no outbox
    sweep publishes them meanwhile. Safe to run in several schedulers at once
    (rows locked, skip locked).
    """
    now = sweep.now or selectors.database_now()
    with transaction.atomic():
        ids = list(
            selectors.jobs_due_for_retry(now=now, limit=sweep.limit)
            .select_for_update(skip_locked=True)
            .values_list("id", flat=True)
        )
        if ids:
            Job.objects.filter(
                id__in=ids, status__in=(JobStatus.RETRYING, JobStatus.DELAYED)
            ).update(**changes.queued(now=now), **outbox_claim.claim_fields(claimer=sweep.claimer))
    return ids


def expire_leases(sweep: Sweep, *, backend: OrmBackend, effects: Effects) -> list[Job]:
    """Close running attempts past their lease as `worker_lost`; returns their jobs (those
    queued again are to be published; the others are dead). A lease outlives the hard time limit, so such
    an attempt cannot still be running: its worker died with nobody to record it."""
    now = sweep.now or selectors.database_now()
    closed: list[Job] = []
    for job_id in list(
        selectors.jobs_lease_expired(now=now, limit=sweep.limit).values_list("id", flat=True)
    ):
        with transaction.atomic():
            job = (
                Job.objects.select_for_update()
                .filter(id=job_id, status=JobStatus.RUNNING, lease_expires_at__lt=now)
                .first()
            )
            row = job.attempts.filter(number=job.attempts_made).first() if job else None
            if job is None or row is None or row.finished_at is not None:
                continue
            message = "lease expired: no worker finished this attempt"
            backend.lose_locked(job, row, now=now, requeued=False, message=message, effects=effects)
            closed.append(job)
    return closed


def reopen_outbox(*, published_before: datetime, limit: int) -> int:
    """Mark queued jobs published before `published_before` unpublished, for the sweep to
    republish (messages the broker lost). Returns how many rows were reopened."""
    ids = list(
        selectors.jobs_published_before(published_before=published_before, limit=limit).values_list(
            "id", flat=True
        )
    )
    if not ids:
        return 0
    return Job.objects.filter(
        id__in=ids, status=JobStatus.QUEUED, published_at__lt=published_before
    ).update(published_at=None, publish_claimed_until=None)


def unpublished_before(now: datetime) -> datetime:
    """The enqueue time before which a queued, unpublished job is the outbox sweep's."""
    return now - timedelta(seconds=settings.JOBS_SWEEP_UNPUBLISHED_AFTER)
