"""services.attempt_start: which deliveries run, which are dropped, and worker loss on redelivery."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psutil
import pytest
from django.apps import apps
from django.utils import timezone

from jobs import services
from jobs.engine import Engine
from jobs.engine.backends import OrmBackend
from jobs.kinds import policy_for
from jobs.models import AttemptOutcome, DeadReason, Job, JobStatus
from jobs.runner import execute_attempt
from jobs.tasks import record_hard_time_limit

pytestmark = pytest.mark.django_db

HOST = "worker-1@unit-box"


def _start(job: Job, attempt: int, *, hostname: str = HOST, pid: int | None = None) -> Any:
    return services.attempt_start(
        job_id=job.id, attempt=attempt, hostname=hostname, pid=pid or os.getpid(), rss_bytes=1000
    )


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not psutil.pid_exists(child.pid)
    return child.pid


# --- start ---------------------------------------------------------------------


def test_attempt_start_queued_job_becomes_running(
    settings: Any, job_factory: Callable[..., Any]
) -> None:
    job = job_factory()
    before = timezone.now()

    started = _start(job, 1)

    job.refresh_from_db()
    policy = policy_for(job.kind)
    assert started is not None
    assert (started.job_id, started.attempt, started.kind) == (job.id, 1, "demo.flaky")
    assert started.payload == job.payload
    assert started.policy == policy
    assert job.status == JobStatus.RUNNING
    assert job.attempts_made == 1
    assert job.started_at is not None
    lease = timedelta(seconds=policy.hard_time_limit + settings.JOBS_LEASE_GRACE)
    assert before + lease <= job.lease_expires_at <= timezone.now() + lease
    attempt = job.attempts.get()
    assert (attempt.number, attempt.worker_hostname, attempt.worker_pid) == (1, HOST, os.getpid())
    assert attempt.rss_before_bytes == 1000
    assert attempt.finished_at is None


@pytest.mark.parametrize("fast", [True, False])
def test_attempt_start_never_reads_before_the_enqueue_it_ran_from(
    job_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, fast: bool
) -> None:
    # given a job enqueued by a host whose estimate of the database's clock runs 40 ms ahead
    job = job_factory()
    ahead = timezone.now() + timedelta(milliseconds=40)
    Job.objects.filter(id=job.id).update(enqueued_at=ahead)
    if not fast:
        monkeypatch.setattr(apps.get_app_config("jobs"), "engine", Engine(OrmBackend()))

    # when this host starts it at once
    assert _start(job, 1) is not None

    # then the attempt and the job read as started at the enqueue, not before it
    job.refresh_from_db()
    assert job.attempts.get().started_at == ahead
    assert job.started_at == ahead


def test_attempt_start_missing_job_is_dropped() -> None:

    assert (
        services.attempt_start(job_id=uuid.uuid4(), attempt=1, hostname=HOST, pid=1, rss_bytes=None)
        is None
    )


@pytest.mark.parametrize("attempt", [2, 5])
def test_attempt_start_stale_attempt_number_is_dropped(
    job_factory: Callable[..., Any], attempt: int
) -> None:
    job = job_factory()

    assert _start(job, attempt) is None

    job.refresh_from_db()
    assert (job.status, job.attempts_made) == (JobStatus.QUEUED, 0)
    assert not job.attempts.exists()


def test_attempt_start_retrying_job_is_dropped(job_factory: Callable[..., Any]) -> None:
    job = job_factory(
        status=JobStatus.RETRYING,
        attempts_made=1,
        next_attempt_at=timezone.now() + timedelta(hours=1),
    )

    assert _start(job, 1) is None
    assert _start(job, 2) is None
    job.refresh_from_db()
    assert job.status == JobStatus.RETRYING


@pytest.mark.parametrize("status", [JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED])
def test_attempt_start_terminal_job_is_dropped(
    job_factory: Callable[..., Any], status: str
) -> None:
    job = job_factory(status=status, attempts_made=1)

    assert _start(job, 2) is None

    job.refresh_from_db()
    assert job.status == status
    assert not job.attempts.exists()


def test_attempt_start_counts_every_delivery(job_factory: Callable[..., Any]) -> None:
    job = job_factory()

    _start(job, 1)
    _start(job, 1, hostname="worker-2@other-box")
    _start(job, 7)

    job.refresh_from_db()
    assert job.deliveries == 3
    assert job.attempts.count() == 1


def test_attempt_start_duplicate_while_attempt_may_be_live_is_dropped(
    running_job: Job,
) -> None:
    # given attempt 1 running on another machine, lease not expired
    # when the same message is delivered again
    started = _start(running_job, 1, hostname="worker-2@other-box")

    # then it is dropped and the live attempt is untouched
    assert started is None
    running_job.refresh_from_db()
    assert running_job.status == JobStatus.RUNNING
    attempt = running_job.attempts.get()
    assert attempt.finished_at is None
    assert attempt.outcome == ""


def test_attempt_start_redelivery_same_machine_live_pid_is_dropped(
    job_factory: Callable[..., Any], attempt_factory: Callable[..., Any]
) -> None:
    # given attempt 1 running in a live process (our parent) on this machine
    job = job_factory(
        status=JobStatus.RUNNING,
        attempts_made=1,
        lease_expires_at=timezone.now() + timedelta(minutes=5),
    )
    attempt_factory(job, number=1, worker_hostname="worker-1@unit-box", worker_pid=os.getppid())

    # then a redelivery to a sibling child does not start a second live attempt
    assert _start(job, 1, hostname="worker-1@unit-box", pid=os.getpid() + 1) is None
    assert job.attempts.get().finished_at is None


def test_attempt_start_redelivery_after_dead_worker_records_worker_lost(
    job_factory: Callable[..., Any], attempt_factory: Callable[..., Any]
) -> None:
    # given attempt 1 "running" in a process on this machine that has died
    job = job_factory(
        status=JobStatus.RUNNING,
        attempts_made=1,
        lease_expires_at=timezone.now() + timedelta(minutes=5),
    )
    attempt_factory(job, number=1, worker_hostname="worker-1@unit-box", worker_pid=_dead_pid())

    # when the broker redelivers the message to another child of this machine
    started = _start(job, 1, hostname="worker-1@unit-box")

    # then attempt 1 is worker_lost and the delivery runs attempt 2
    lost = job.attempts.get(number=1)
    assert lost.outcome == AttemptOutcome.WORKER_LOST
    assert lost.error_type == "WorkerLostError"
    assert lost.finished_at is not None
    assert started is not None
    assert started.attempt == 2
    job.refresh_from_db()
    assert (job.status, job.attempts_made, job.worker_losses) == (JobStatus.RUNNING, 2, 1)
    assert "WorkerLostError" in job.last_error


def test_attempt_start_redelivery_after_lease_expired_records_worker_lost(
    job_factory: Callable[..., Any], attempt_factory: Callable[..., Any]
) -> None:
    # given attempt 1 on another machine whose lease has expired
    job = job_factory(
        status=JobStatus.RUNNING,
        attempts_made=1,
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )
    attempt_factory(job, number=1, worker_hostname="worker-9@elsewhere")

    # when it is redelivered here
    started = _start(job, 1)

    # then the lost attempt is closed and the next one starts
    assert job.attempts.get(number=1).outcome == AttemptOutcome.WORKER_LOST
    assert started is not None
    assert started.attempt == 2


def test_attempt_start_redelivery_past_poison_cap_is_dead_poison(
    settings: Any, job_factory: Callable[..., Any], attempt_factory: Callable[..., Any]
) -> None:
    # given a job whose worker was lost twice already and a poison cap of 3
    settings.JOBS_POISON_AFTER = 3
    job = job_factory(
        status=JobStatus.RUNNING,
        attempts_made=3,
        worker_losses=2,
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )
    attempt_factory(job, number=3)

    # when its message comes back once more after another loss
    started = _start(job, 3)

    # then the job is dead with reason poison and nothing runs
    assert started is None
    job.refresh_from_db()
    assert (job.status, job.dead_reason, job.worker_losses) == (
        JobStatus.DEAD,
        DeadReason.POISON,
        3,
    )


def test_attempt_start_redelivery_of_last_attempt_lost_is_dead_exhausted(
    job_factory: Callable[..., Any], attempt_factory: Callable[..., Any]
) -> None:
    job = job_factory(
        status=JobStatus.RUNNING,
        attempts_made=2,
        max_attempts=2,
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )
    attempt_factory(job, number=2)

    assert _start(job, 2) is None

    job.refresh_from_db()
    assert (job.status, job.dead_reason) == (JobStatus.DEAD, DeadReason.EXHAUSTED)


# Regression: a redelivered message for attempt N runs attempt N+1 after a
# worker loss; the whole attempt must be recorded under N+1.
def test_execute_attempt_redelivery_after_worker_loss_finishes_new_attempt(
    job_factory: Callable[..., Any], attempt_factory: Callable[..., Any]
) -> None:
    # given attempt 1 lost with its (dead) worker process on this machine
    job = job_factory(
        status=JobStatus.RUNNING,
        attempts_made=1,
        payload={"fail_times": 0, "sleep_seconds": 0},
        lease_expires_at=timezone.now() + timedelta(minutes=5),
    )
    attempt_factory(job, number=1, worker_hostname=HOST, worker_pid=_dead_pid())

    # when the message for attempt 1 is redelivered and runs here
    status = execute_attempt(job_id=str(job.id), attempt=1, hostname=HOST).status

    # then attempt 2 ran to completion and the job succeeded
    job.refresh_from_db()
    assert job.attempts.get(number=2).outcome == AttemptOutcome.SUCCEEDED
    assert job.result == {"attempt": 2}
    assert status == JobStatus.SUCCEEDED


# Regression (fixed): the hard-time-limit hook records the attempt number
# the message was published for, not the job's current attempt, so after a
# worker loss + redelivery the attempt that hit the hard limit is left open
# until its lease expires and is then counted as another worker loss (towards
# poison). Fix: jobs.tasks.record_hard_time_limit finishes the job's current attempt.
def test_hard_timeout_after_redelivery_records_the_running_attempt(
    job_factory: Callable[..., Any], attempt_factory: Callable[..., Any]
) -> None:

    # given the message for attempt 1 redelivered after a worker loss, now running attempt 2
    job = job_factory(
        status=JobStatus.RUNNING,
        attempts_made=2,
        worker_losses=1,
        lease_expires_at=timezone.now() + timedelta(minutes=5),
    )
    attempt_factory(
        job,
        number=1,
        outcome=AttemptOutcome.WORKER_LOST,
        finished_at=timezone.now() - timedelta(seconds=5),
    )
    attempt_factory(job, number=2, worker_hostname=HOST)

    # when the worker's main process reports that message hitting its hard limit
    record_hard_time_limit(job_id=str(job.id), published_attempt=1, timeout=45)

    # then attempt 2 is recorded as a hard timeout and the retry policy applies
    job.refresh_from_db()
    assert job.attempts.get(number=2).outcome == AttemptOutcome.HARD_TIMEOUT
    assert job.status == JobStatus.RETRYING
