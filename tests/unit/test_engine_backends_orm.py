"""jobs.engine.backends.orm: the general path, the job row locked."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from jobs.engine.backends.orm import OrmBackend
from jobs.engine.overlap import provably_over
from jobs.engine.values import AttemptRef, AttemptReport, Delivery, Effects, Loss
from jobs.models import AttemptOutcome, DeadReason, Job, JobStatus
from jobs.reasons import DropReason

pytestmark = pytest.mark.django_db

HOST = "worker-1@unit-box"


def _deliver(job: Job, attempt: int = 1, **fields: Any) -> Delivery:
    return Delivery(job_id=job.id, attempt=attempt, hostname=HOST, pid=os.getpid(), **fields)


def test_orm_start_then_finish_writes_both_rows(job_factory: Callable[..., Job]) -> None:
    job = job_factory()
    backend, effects = OrmBackend(), Effects()

    started = backend.start(_deliver(job), now=timezone.now(), effects=effects)
    assert started is not None
    end = backend.finish(
        AttemptRef(job_id=job.id, number=1, rss_bytes=5),
        AttemptReport(outcome=AttemptOutcome.SUCCEEDED, result=[1]),
        now=timezone.now(),
        effects=effects,
    )

    assert end.status == JobStatus.SUCCEEDED
    job.refresh_from_db()
    assert (job.status, job.result, job.deliveries) == (JobStatus.SUCCEEDED, [1], 1)
    assert job.attempts.get().rss_after_bytes == 5
    assert len(effects.events) == 3  # started, finished, completed


def test_orm_start_of_a_live_attempt_is_dropped(running_job: Job) -> None:
    effects = Effects()
    # the running attempt's lease is live and its process (pid 1, another host) unknown
    assert OrmBackend().start(_deliver(running_job), now=timezone.now(), effects=effects) is None

    ((_, sent),) = effects.events
    assert sent["reason"] == DropReason.LIVE


def test_orm_resume_returns_the_attempt_this_process_started(
    job_factory: Callable[..., Job],
) -> None:
    job = job_factory()
    backend = OrmBackend()
    first = backend.start(_deliver(job), now=timezone.now(), effects=Effects())

    again = backend.start(_deliver(job, resume=True), now=timezone.now(), effects=Effects())

    assert first is not None
    assert again is not None
    assert again.attempt == first.attempt == 1
    assert job.attempts.count() == 1


def test_orm_lose_counts_the_loss_and_requeues(running_job: Job) -> None:
    end = OrmBackend().lose(
        Loss(job_id=running_job.id, attempt=1, worker_pid=1, message="SIGKILL"),
        now=timezone.now(),
        effects=Effects(),
    )

    assert end.status == JobStatus.QUEUED
    running_job.refresh_from_db()
    assert running_job.worker_losses == 1
    assert running_job.published_at is not None
    assert running_job.last_error == "WorkerLostError: SIGKILL"


def test_orm_lose_after_poison_bound_is_dead(running_job: Job, settings: Any) -> None:
    settings.JOBS_POISON_AFTER = 1

    end = OrmBackend().lose(
        Loss(job_id=running_job.id, attempt=1, worker_pid=None, message="gone"),
        now=timezone.now(),
        effects=Effects(),
    )

    assert end.decision is not None
    assert end.decision.dead_reason == DeadReason.POISON


def test_orm_provably_over_when_the_lease_expired(running_job: Job) -> None:
    row = running_job.attempts.get()
    later = timezone.now() + timedelta(hours=1)

    assert provably_over(row, running_job, now=later, hostname="other@box")
    assert not provably_over(row, running_job, now=timezone.now(), hostname="other@box")
