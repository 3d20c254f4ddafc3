"""Scheduler services (due retries, outbox, leases) and cancel / requeue transitions."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.utils import timezone

from devstack.services import RedisServer, wait_for
from jobs import broker, services
from jobs.errors import InvalidTransition
from jobs.models import AttemptOutcome, DeadReason, Job, JobStatus
from jobs.supervisor import cancel_key

pytestmark = pytest.mark.django_db


def _retrying(job_factory: Callable[..., Any], *, due_in: float, **fields: Any) -> Job:
    return job_factory(
        status=JobStatus.RETRYING,
        attempts_made=1,
        next_attempt_at=timezone.now() + timedelta(seconds=due_in),
        published_at=timezone.now() - timedelta(minutes=1),
        **fields,
    )


# --- due retries -------------------------------------------------------------------


def test_retries_promote_due_moves_only_due_jobs_to_queued(
    job_factory: Callable[..., Any],
) -> None:
    # given one retry due and one an hour away
    due = _retrying(job_factory, due_in=-1)
    later = _retrying(job_factory, due_in=3600)

    # when the scheduler promotes
    promoted = services.retries_promote_due()

    # then only the due one is queued, waiting for its publish
    due.refresh_from_db()
    later.refresh_from_db()
    assert promoted == 1
    assert due.status == JobStatus.QUEUED
    assert due.next_attempt_at is None
    assert due.published_at is None
    assert due.enqueued_at is not None
    assert later.status == JobStatus.RETRYING


def test_retries_promote_due_publishes_on_commit(
    job_factory: Callable[..., Any],
    broker_redis: redis.Redis,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    job = _retrying(job_factory, due_in=-1)

    with django_capture_on_commit_callbacks(execute=True):
        services.retries_promote_due()

    job.refresh_from_db()
    assert job.published_at is not None
    assert broker_redis.llen("default") == 1


def test_retries_promote_due_respects_limit(job_factory: Callable[..., Any]) -> None:
    for _ in range(3):
        _retrying(job_factory, due_in=-1)

    assert services.retries_promote_due(limit=2) == 2
    assert Job.objects.filter(status=JobStatus.RETRYING).count() == 1


def test_retries_promote_due_nothing_due_returns_zero(job_factory: Callable[..., Any]) -> None:
    _retrying(job_factory, due_in=60)

    assert services.retries_promote_due() == 0


# --- outbox sweep ------------------------------------------------------------------


def test_outbox_sweep_publishes_only_old_unpublished_rows(
    job_factory: Callable[..., Any], broker_redis: redis.Redis
) -> None:
    # given a row unpublished for a minute, a fresh one and a published one
    stale = job_factory(enqueued_at=timezone.now() - timedelta(minutes=1))
    fresh = job_factory()
    published = job_factory(
        enqueued_at=timezone.now() - timedelta(minutes=1), published_at=timezone.now()
    )

    # when the sweep runs
    count = services.outbox_sweep()

    # then only the stale one was published
    assert count == 1
    for job in (stale, fresh, published):
        job.refresh_from_db()
    assert stale.published_at is not None
    assert fresh.published_at is None
    assert broker_redis.llen("default") == 1


def test_outbox_sweep_broker_outage_loses_nothing(
    job_factory: Callable[..., Any], private_broker: RedisServer, broker_redis: redis.Redis
) -> None:
    # given an unpublished row and the broker down
    job = job_factory(enqueued_at=timezone.now() - timedelta(minutes=1))
    private_broker.stop()
    try:
        # when the sweep runs during the outage
        during = services.outbox_sweep()
        job.refresh_from_db()
        still_unpublished = job.published_at is None
    finally:
        private_broker.start()

    # then nothing was published, and the first sweep after recovery (and after
    # the broker backoff, JOBS_BROKER_BACKOFF_SECONDS) publishes it
    assert during == 0
    assert still_unpublished
    wait_for(lambda: not broker.in_backoff(), timeout=10, what="the backoff over")
    after = services.outbox_sweep()
    job.refresh_from_db()
    assert after == 1
    assert job.published_at is not None
    assert redis.Redis.from_url(private_broker.url).llen("default") == 1


# --- leases ------------------------------------------------------------------------


def test_leases_expire_closes_lost_attempt_and_requeues(
    running_job: Job,
    broker_redis: redis.Redis,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    # given a running attempt whose lease ran out (its worker vanished)
    Job.objects.filter(pk=running_job.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )

    # when the lease sweep runs
    with django_capture_on_commit_callbacks(execute=True):
        closed = services.leases_expire()

    # then the attempt is worker_lost and the job queued again and published
    running_job.refresh_from_db()
    attempt = running_job.attempts.get()
    assert closed == 1
    assert attempt.outcome == AttemptOutcome.WORKER_LOST
    assert attempt.finished_at is not None
    assert running_job.status == JobStatus.QUEUED
    assert running_job.worker_losses == 1
    assert running_job.lease_expires_at is None
    assert running_job.published_at is not None
    assert broker_redis.llen("default") == 1


def test_leases_expire_live_lease_untouched(running_job: Job) -> None:
    assert services.leases_expire() == 0

    running_job.refresh_from_db()
    assert running_job.status == JobStatus.RUNNING
    assert running_job.attempts.get().finished_at is None


def test_leases_expire_uses_given_now(running_job: Job) -> None:
    assert services.leases_expire(now=timezone.now() + timedelta(hours=1)) == 1


def test_leases_expire_last_attempt_is_dead_exhausted(
    job_factory: Callable[..., Any], attempt_factory: Callable[..., Any]
) -> None:
    job = job_factory(
        status=JobStatus.RUNNING,
        attempts_made=2,
        max_attempts=2,
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )
    attempt_factory(job, number=2)

    services.leases_expire()

    job.refresh_from_db()
    assert (job.status, job.dead_reason) == (JobStatus.DEAD, DeadReason.EXHAUSTED)


# --- cancel ------------------------------------------------------------------------


@pytest.mark.parametrize("status", [JobStatus.QUEUED, JobStatus.RETRYING])
def test_job_cancel_waiting_job(job_factory: Callable[..., Any], status: str) -> None:
    job = job_factory(status=status, next_attempt_at=timezone.now() + timedelta(minutes=1))

    services.job_cancel(job_id=job.id)

    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED
    assert job.finished_at is not None
    assert job.next_attempt_at is None
    assert services.retries_promote_due(now=timezone.now() + timedelta(hours=1)) == 0


def test_job_cancel_running_job_signals_the_attempt(
    running_job: Job,
    broker_redis: redis.Redis,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:

    with django_capture_on_commit_callbacks(execute=True):
        services.job_cancel(job_id=running_job.id)

    running_job.refresh_from_db()
    assert running_job.status == JobStatus.CANCELLED
    assert running_job.lease_expires_at is None
    assert broker_redis.exists(cancel_key(running_job.id))
    assert 0 < broker_redis.ttl(cancel_key(running_job.id)) <= 3600


@pytest.mark.parametrize("status", [JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED])
def test_job_cancel_terminal_job_is_invalid_transition(
    job_factory: Callable[..., Any], status: str
) -> None:
    job = job_factory(status=status)

    with pytest.raises(InvalidTransition, match=status):
        services.job_cancel(job_id=job.id)

    job.refresh_from_db()
    assert job.status == status


def test_job_cancel_missing_job_raises_does_not_exist() -> None:
    with pytest.raises(Job.DoesNotExist):
        services.job_cancel(job_id=uuid.uuid4())


# --- requeue -----------------------------------------------------------------------


def test_job_requeue_exhausted_job_gets_one_more_attempt(
    job_factory: Callable[..., Any],
    broker_redis: redis.Redis,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    # given a job dead after 5 of 5 attempts
    job = job_factory(
        status=JobStatus.DEAD,
        dead_reason=DeadReason.EXHAUSTED,
        attempts_made=5,
        max_attempts=5,
        finished_at=timezone.now(),
        published_at=timezone.now(),
    )

    # when it is requeued
    with django_capture_on_commit_callbacks(execute=True):
        services.job_requeue(job_id=job.id)

    # then it is queued with one more attempt (never double the budget), published for attempt 6
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED
    assert job.max_attempts == 6
    assert job.dead_reason == ""
    assert job.finished_at is None
    assert job.published_at is not None
    [raw] = broker_redis.lrange("default", 0, -1)
    assert f"{job.id}:6".encode() in raw


@pytest.mark.parametrize(
    "status",
    [
        JobStatus.QUEUED,
        JobStatus.RUNNING,
        JobStatus.RETRYING,
        JobStatus.SUCCEEDED,
        JobStatus.CANCELLED,
    ],
)
def test_job_requeue_not_dead_is_invalid_transition(
    job_factory: Callable[..., Any], status: str
) -> None:
    job = job_factory(status=status)

    with pytest.raises(InvalidTransition, match="only dead jobs"):
        services.job_requeue(job_id=job.id)

    job.refresh_from_db()
    assert job.status == status


def test_job_requeue_missing_job_raises_does_not_exist() -> None:
    with pytest.raises(Job.DoesNotExist):
        services.job_requeue(job_id=uuid.uuid4())
