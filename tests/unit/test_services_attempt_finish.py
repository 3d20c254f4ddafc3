"""services.attempt_finish: how an attempt's ending moves the job (retry, dead, succeeded)."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from jobs import services
from jobs.kinds import policy_for
from jobs.models import Attempt, AttemptOutcome, DeadReason, Job, JobStatus
from jobs.services import AttemptReport

pytestmark = pytest.mark.django_db

HOST = "worker-1@unit-box"


def _start(job: Job, attempt: int, *, hostname: str = HOST, pid: int | None = None) -> Any:
    return services.attempt_start(
        job_id=job.id, attempt=attempt, hostname=hostname, pid=pid or os.getpid(), rss_bytes=1000
    )


def _failed(*, retryable: bool = True, retry_after: float | None = None) -> AttemptReport:
    return AttemptReport(
        outcome=AttemptOutcome.ERROR,
        error_type="RetryableError" if retryable else "PermanentError",
        error_message="boom",
        retryable=retryable,
        retry_after=retry_after,
    )


# --- finish ----------------------------------------------------------------------


def test_attempt_finish_success_records_result(running_job: Job) -> None:
    status = services.attempt_finish(
        job_id=running_job.id,
        attempt=1,
        report=AttemptReport(outcome=AttemptOutcome.SUCCEEDED, result={"n": 1}),
        rss_bytes=2000,
    ).status

    running_job.refresh_from_db()
    assert status == JobStatus.SUCCEEDED
    assert running_job.status == JobStatus.SUCCEEDED
    assert running_job.result == {"n": 1}
    assert running_job.finished_at is not None
    assert running_job.lease_expires_at is None
    attempt = running_job.attempts.get()
    assert attempt.outcome == AttemptOutcome.SUCCEEDED
    assert attempt.rss_after_bytes == 2000
    assert attempt.finished_at is not None


@pytest.mark.parametrize(
    "outcome", [AttemptOutcome.ERROR, AttemptOutcome.SOFT_TIMEOUT, AttemptOutcome.HARD_TIMEOUT]
)
def test_attempt_finish_retryable_failure_goes_retrying_within_bounds(
    job_factory: Callable[..., Any], attempt_factory: Callable[..., Any], outcome: str
) -> None:
    # given attempt 3 of 5 running
    job = job_factory(status=JobStatus.RUNNING, attempts_made=3)
    attempt_factory(job, number=3)
    low, high = policy_for(job.kind).backoff_bounds(3)

    # when it fails retryably
    before = timezone.now()
    status = services.attempt_finish(
        job_id=job.id,
        attempt=3,
        report=AttemptReport(outcome=outcome, error_type="X", error_message="boom"),
    ).status
    after = timezone.now()

    # then the job waits for a retry within the policy's bounds for attempt 3
    job.refresh_from_db()
    assert status == JobStatus.RETRYING
    assert job.status == JobStatus.RETRYING
    assert before + timedelta(seconds=low) <= job.next_attempt_at
    assert job.next_attempt_at <= after + timedelta(seconds=high)
    attempt = job.attempts.get()
    assert attempt.outcome == outcome
    assert low <= attempt.retry_delay_seconds <= high
    assert job.last_error == "X: boom"
    assert job.lease_expires_at is None
    assert job.finished_at is None


def test_attempt_finish_retry_after_sets_minimum_delay(running_job: Job) -> None:
    before = timezone.now()

    services.attempt_finish(job_id=running_job.id, attempt=1, report=_failed(retry_after=120.0))

    running_job.refresh_from_db()
    assert running_job.next_attempt_at >= before + timedelta(seconds=120)
    assert running_job.attempts.get().retry_delay_seconds == 120.0


def test_attempt_finish_last_attempt_failing_is_dead_exhausted(
    job_factory: Callable[..., Any], attempt_factory: Callable[..., Any]
) -> None:
    job = job_factory(status=JobStatus.RUNNING, attempts_made=3, max_attempts=3)
    attempt_factory(job, number=3)

    status = services.attempt_finish(job_id=job.id, attempt=3, report=_failed()).status

    job.refresh_from_db()
    assert status == JobStatus.DEAD
    assert (job.status, job.dead_reason) == (JobStatus.DEAD, DeadReason.EXHAUSTED)
    assert job.finished_at is not None
    assert job.next_attempt_at is None


def test_attempt_finish_permanent_error_is_dead_error(running_job: Job) -> None:
    status = services.attempt_finish(
        job_id=running_job.id, attempt=1, report=_failed(retryable=False)
    ).status

    running_job.refresh_from_db()
    assert status == JobStatus.DEAD
    assert (running_job.status, running_job.dead_reason) == (JobStatus.DEAD, DeadReason.ERROR)
    assert running_job.last_error == "PermanentError: boom"


def test_attempt_finish_cancelled_outcome_is_not_retried(running_job: Job) -> None:
    report = AttemptReport(outcome=AttemptOutcome.CANCELLED, error_type="Cancelled")

    services.attempt_finish(job_id=running_job.id, attempt=1, report=report)

    running_job.refresh_from_db()
    assert running_job.status == JobStatus.DEAD
    assert running_job.next_attempt_at is None


def test_attempt_finish_twice_second_is_ignored(running_job: Job) -> None:
    services.attempt_finish(job_id=running_job.id, attempt=1, report=_failed(retryable=False))

    again = services.attempt_finish(
        job_id=running_job.id,
        attempt=1,
        report=AttemptReport(outcome=AttemptOutcome.SUCCEEDED, result=1),
    ).status

    running_job.refresh_from_db()
    assert again is None
    assert running_job.status == JobStatus.DEAD
    assert running_job.attempts.get().outcome == AttemptOutcome.ERROR


def test_attempt_finish_stale_attempt_number_is_ignored(
    job_factory: Callable[..., Any], attempt_factory: Callable[..., Any]
) -> None:
    # given attempt 2 running and attempt 1 left unfinished
    job = job_factory(status=JobStatus.RUNNING, attempts_made=2)
    attempt_factory(job, number=1)
    attempt_factory(job, number=2)

    # when attempt 1 reports success late
    status = services.attempt_finish(
        job_id=job.id, attempt=1, report=AttemptReport(outcome=AttemptOutcome.SUCCEEDED)
    ).status

    # then the row is closed but the job follows attempt 2 only
    job.refresh_from_db()
    assert status is None
    assert job.status == JobStatus.RUNNING
    assert job.attempts.get(number=1).outcome == AttemptOutcome.SUCCEEDED
    assert job.attempts.get(number=2).finished_at is None


def test_attempt_finish_unknown_attempt_is_ignored(running_job: Job) -> None:
    assert (
        services.attempt_finish(job_id=running_job.id, attempt=9, report=_failed()).status is None
    )


def test_attempt_finish_after_cancel_keeps_job_cancelled(running_job: Job) -> None:
    # given a running job cancelled mid-attempt
    services.job_cancel(job_id=running_job.id)

    # when the attempt reports success afterwards
    status = services.attempt_finish(
        job_id=running_job.id,
        attempt=1,
        report=AttemptReport(outcome=AttemptOutcome.SUCCEEDED, result={"late": True}),
    ).status

    # then the job stays cancelled without a result; the attempt row is closed
    running_job.refresh_from_db()
    assert status is None
    assert running_job.status == JobStatus.CANCELLED
    assert running_job.result is None
    assert running_job.attempts.get().finished_at is not None


def test_attempt_interrupted_hard_timeout_goes_retrying(running_job: Job) -> None:
    status = services.attempt_interrupted(
        job_id=running_job.id,
        attempt=1,
        outcome=AttemptOutcome.HARD_TIMEOUT,
        message="hard time limit exceeded",
    ).status

    assert status == JobStatus.RETRYING
    assert running_job.attempts.get().outcome == AttemptOutcome.HARD_TIMEOUT


# --- a whole life ------------------------------------------------------------------


def test_attempt_lifecycle_fail_then_retry_then_succeed(job_factory: Callable[..., Any]) -> None:
    # given a queued job
    job = job_factory()

    # when attempt 1 fails, the retry comes due and attempt 2 succeeds
    _start(job, 1)
    services.attempt_finish(job_id=job.id, attempt=1, report=_failed())
    promoted = services.retries_promote_due(now=timezone.now() + timedelta(hours=1))
    started = _start(job, 2)
    status = services.attempt_finish(
        job_id=job.id,
        attempt=2,
        report=AttemptReport(outcome=AttemptOutcome.SUCCEEDED, result="done"),
    ).status

    # then the job succeeded after exactly two attempts
    job.refresh_from_db()
    assert promoted == 1
    assert started is not None
    assert status == JobStatus.SUCCEEDED
    assert job.attempts_made == 2
    assert list(job.attempts.values_list("number", "outcome")) == [
        (1, AttemptOutcome.ERROR),
        (2, AttemptOutcome.SUCCEEDED),
    ]


def test_attempt_lifecycle_always_failing_dies_after_max_attempts(
    settings: Any, job_factory: Callable[..., Any]
) -> None:
    # given a job allowed 3 attempts
    job = job_factory(max_attempts=3)

    # when every attempt fails retryably
    for n in range(1, 6):
        if _start(job, n) is None:
            break
        services.attempt_finish(job_id=job.id, attempt=n, report=_failed())
        services.retries_promote_due(now=timezone.now() + timedelta(hours=1))

    # then it is dead (exhausted) after exactly 3 attempts
    job.refresh_from_db()
    assert (job.status, job.dead_reason) == (JobStatus.DEAD, DeadReason.EXHAUSTED)
    assert Attempt.objects.filter(job=job).count() == 3
