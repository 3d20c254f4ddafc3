"""Requeue's attempt budget, retry-now, and the History entries every action leaves."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.contrib.admin.models import LogEntry
from django.utils import timezone

from jobs import services
from jobs.errors import InvalidTransition
from jobs.models import DeadReason, JobStatus


@pytest.mark.parametrize(
    ("attempts_made", "max_attempts", "reason", "expected"),
    [
        (5, 5, DeadReason.EXHAUSTED, 6),  # used up: exactly one more
        (2, 5, DeadReason.ERROR, 5),  # died early: keeps the 3 it had left
        (3, 10, DeadReason.POISON, 10),
    ],
)
def test_job_requeue_budget_is_attempts_left_at_least_one(
    job_factory: Callable[..., Any],
    broker_redis: redis.Redis,
    attempts_made: int,
    max_attempts: int,
    reason: str,
    expected: int,
) -> None:
    job = job_factory(
        status=JobStatus.DEAD,
        dead_reason=reason,
        attempts_made=attempts_made,
        max_attempts=max_attempts,
        worker_losses=3,
        finished_at=timezone.now(),
    )

    services.job_requeue(job_id=job.id)

    job.refresh_from_db()
    assert (job.status, job.max_attempts, job.worker_losses) == (JobStatus.QUEUED, expected, 0)


def test_job_requeue_twice_adds_one_attempt_each_time(
    job_factory: Callable[..., Any], broker_redis: redis.Redis
) -> None:
    # given an exhausted job requeued once, which died again after its extra attempt
    job = job_factory(status=JobStatus.DEAD, attempts_made=5, max_attempts=5)
    services.job_requeue(job_id=job.id)
    job.refresh_from_db()
    job.status, job.attempts_made = JobStatus.DEAD, 6
    job.save()

    # when it is requeued again
    services.job_requeue(job_id=job.id)

    # then it may make a 7th attempt, not 12
    job.refresh_from_db()
    assert job.max_attempts == 7


def test_job_retry_now_retrying_job_queued_and_published_at_once(
    job_factory: Callable[..., Any],
    broker_redis: redis.Redis,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    # given a job waiting an hour for attempt 3 of 5
    job = job_factory(
        status=JobStatus.RETRYING,
        attempts_made=2,
        next_attempt_at=timezone.now() + timedelta(hours=1),
    )

    # when it is retried now
    with django_capture_on_commit_callbacks(execute=True):
        services.job_retry_now(job_id=job.id)

    # then it is queued without a due time, its budget unchanged, and attempt 3 is published
    job.refresh_from_db()
    assert (job.status, job.next_attempt_at, job.max_attempts) == (JobStatus.QUEUED, None, 5)
    [raw] = broker_redis.lrange("default", 0, -1)
    assert f"{job.id}:3".encode() in raw


def test_job_retry_now_dead_job_is_requeued(
    job_factory: Callable[..., Any], broker_redis: redis.Redis
) -> None:
    job = job_factory(status=JobStatus.DEAD, dead_reason=DeadReason.EXHAUSTED, attempts_made=5)

    services.job_retry_now(job_id=job.id)

    job.refresh_from_db()
    assert (job.status, job.max_attempts, job.dead_reason) == (JobStatus.QUEUED, 6, "")


@pytest.mark.parametrize(
    "status", [JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.CANCELLED]
)
def test_job_retry_now_other_status_is_invalid_transition(
    job_factory: Callable[..., Any], status: str
) -> None:
    job = job_factory(status=status)

    with pytest.raises(InvalidTransition, match="only dead or retrying"):
        services.job_retry_now(job_id=job.id)


def test_actions_with_an_actor_leave_history_entries(
    job_factory: Callable[..., Any], broker_redis: redis.Redis, user: Any
) -> None:
    # given a dead job and a queued one
    dead = job_factory(status=JobStatus.DEAD, dead_reason=DeadReason.EXHAUSTED, attempts_made=5)
    queued = job_factory()

    # when a user requeues one via the admin and cancels the other via the API
    services.job_requeue(job_id=dead.id, actor=user, via="admin")
    services.job_cancel(job_id=queued.id, actor=user, via="API")
    services.job_cancel(job_id=dead.id)  # no actor: nothing recorded

    # then each job's History names the user, the door and what happened to the budget
    [requeued] = LogEntry.objects.filter(object_id=str(dead.id))
    assert requeued.user_id == user.pk
    assert requeued.get_change_message() == (
        "Requeued via admin: dead (exhausted) → queued; 5 attempts made, "
        "max attempts 5 → 6 (one more attempt)."
    )
    [cancelled] = LogEntry.objects.filter(object_id=str(queued.id))
    assert cancelled.get_change_message() == "Cancelled via API: queued → cancelled."
