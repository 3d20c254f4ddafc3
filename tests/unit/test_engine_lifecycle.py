"""jobs.engine.lifecycle: cancel, requeue, retry now and the sweeps' row changes."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.engine import lifecycle
from jobs.engine.backends import OrmBackend
from jobs.engine.values import Effects, JobRef, Sweep
from jobs.errors import InvalidTransition
from jobs.models import AttemptOutcome, DeadReason, Job, JobStatus

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("made", "max_attempts", "expected"), [(5, 5, 6), (2, 5, 5), (0, 3, 3)])
def test_lifecycle_requeue_max_attempts_is_what_is_left_and_at_least_one(
    made: int, max_attempts: int, expected: int
) -> None:
    assert lifecycle.requeue_max_attempts(attempts_made=made, max_attempts=max_attempts) == expected


def test_lifecycle_cancel_collects_completion_and_says_what_it_was(
    job_factory: Callable[..., Job],
) -> None:
    job = job_factory(status=JobStatus.RETRYING, next_attempt_at=timezone.now())
    effects = Effects()

    moved = lifecycle.cancel(JobRef(job.id), effects=effects)

    assert moved.was == JobStatus.RETRYING
    job.refresh_from_db()
    assert (job.status, job.next_attempt_at) == (JobStatus.CANCELLED, None)
    assert len(effects.events) == 1


def test_lifecycle_requeue_refuses_a_job_not_dead(job_factory: Callable[..., Job]) -> None:
    job = job_factory(status=JobStatus.RETRYING)

    with pytest.raises(InvalidTransition, match="only dead jobs"):
        lifecycle.requeue(JobRef(job.id), effects=Effects())
    moved = lifecycle.requeue(JobRef(job.id), effects=Effects(), retrying_too=True)
    assert moved.job.status == JobStatus.QUEUED


def test_lifecycle_requeue_of_a_dead_job_keeps_its_reason_for_history(
    job_factory: Callable[..., Job],
) -> None:
    job = job_factory(
        status=JobStatus.DEAD, dead_reason=DeadReason.POISON, attempts_made=3, worker_losses=3
    )

    moved = lifecycle.requeue(JobRef(job.id), effects=Effects())

    assert (moved.reason, moved.max_attempts_before) == (DeadReason.POISON, 5)
    job.refresh_from_db()
    assert (job.status, job.worker_losses, job.dead_reason) == (JobStatus.QUEUED, 0, "")


def test_lifecycle_promote_due_returns_the_ids_to_publish(job_factory: Callable[..., Job]) -> None:
    due = job_factory(
        status=JobStatus.DELAYED, next_attempt_at=timezone.now() - timedelta(seconds=1)
    )

    assert lifecycle.promote_due(Sweep(limit=10)) == [due.id]
    due.refresh_from_db()
    assert due.status == JobStatus.QUEUED


def test_lifecycle_expire_leases_closes_the_attempt_as_worker_lost(running_job: Job) -> None:
    # given a running attempt whose lease ran out a second ago
    job = running_job
    Job.objects.filter(id=job.id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))

    (closed,) = lifecycle.expire_leases(Sweep(limit=10), backend=OrmBackend(), effects=Effects())

    assert closed.status == JobStatus.QUEUED
    assert job.attempts.get().outcome == AttemptOutcome.WORKER_LOST


def test_lifecycle_reopen_outbox_only_rows_published_before(
    job_factory: Callable[..., Job],
) -> None:
    now = timezone.now()
    old = job_factory(published_at=now - timedelta(minutes=5))
    job_factory(published_at=now + timedelta(minutes=5))

    assert lifecycle.reopen_outbox(published_before=now, limit=10) == 1
    old.refresh_from_db()
    assert old.published_at is None


def test_lifecycle_drop_ends_a_job_waiting_for_that_attempt_dead_delivery_limit(
    job_factory: Callable[..., Job],
) -> None:
    waiting_for_it = job_factory(status=JobStatus.QUEUED, attempts_made=1)
    moved_on = job_factory(status=JobStatus.QUEUED, attempts_made=2)
    effects = Effects()

    ended = lifecycle.drop(JobRef(waiting_for_it.id), attempt=2, effects=effects)
    stale = lifecycle.drop(JobRef(moved_on.id), attempt=2, effects=effects)

    assert ended is not None
    assert stale is None
    waiting_for_it.refresh_from_db()
    moved_on.refresh_from_db()
    assert (waiting_for_it.status, waiting_for_it.dead_reason) == (
        JobStatus.DEAD,
        DeadReason.DELIVERY_LIMIT,
    )
    assert waiting_for_it.finished_at is not None
    assert moved_on.status == JobStatus.QUEUED
    assert len(effects.events) == 1
