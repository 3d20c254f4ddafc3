"""jobs.engine.pausing and the start's pause check on every backend (docs/flow-control.md)."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from jobs import pauses
from jobs.engine import Engine, sql
from jobs.engine.backends import OrmBackend, choose
from jobs.engine.values import Delivery, Effects, Loss, Sweep
from jobs.models import Job, JobStatus
from jobs.reasons import DropReason, WaitingReason

pytestmark = pytest.mark.django_db

HOST = "worker-1@unit-box"


def _deliver(job: Job, attempt: int = 1) -> Delivery:
    return Delivery(job_id=job.id, attempt=attempt, hostname=HOST, pid=os.getpid())


@pytest.mark.parametrize("dialect", ["postgres", "sqlite"])
def test_engine_pausing_fast_start_carries_the_check_in_its_one_statement(dialect: str) -> None:
    queries = sql.queries(dialect)
    start = queries["start"] if dialect == "postgres" else queries["start_job"]

    assert "FROM jobs_pause pz" in start
    assert start.count(";") == 0  # still one statement


def test_engine_pausing_fast_statement_matches_nothing_for_a_paused_job(
    job_factory: Callable[..., Job],
) -> None:
    backend = choose(connection.vendor)
    if backend.name == "orm":
        pytest.skip("no one-statement start on this database")
    job = job_factory(published_at=timezone.now())
    pauses.pause(scope="queue", name="default")
    params = {
        "job_id": str(job.id),
        "number": 1,
        "hostname": HOST,
        "pid": 1,
        "rss": None,
        "now": timezone.now(),
        "running": JobStatus.RUNNING.value,
        "queued": JobStatus.QUEUED.value,
        "due_from": 0.0,
        "due_to": 0.0,
    }

    assert backend.start_statement(params) is None  # type: ignore[attr-defined]
    pauses.resume(scope="queue", name="default")
    assert backend.start_statement(params) is not None  # type: ignore[attr-defined]


@pytest.mark.parametrize("general", [True, False])
def test_engine_pausing_start_holds_and_drops_with_reason_paused(
    job_factory: Callable[..., Job], general: bool
) -> None:
    # given a published job of a paused kind, on the general path or the vendor's fast one
    backend = OrmBackend() if general else choose(connection.vendor)
    job = job_factory(published_at=timezone.now())
    pauses.pause(scope="kind", name="demo.flaky", reason="deploy")
    effects = Effects()

    # when its delivery arrives
    started = backend.start(_deliver(job), now=timezone.now(), effects=effects)

    # then it is held: queued, unpublished, unclaimed, no attempt, one delivery counted
    job.refresh_from_db()
    assert started is None
    assert (job.status, job.attempts_made, job.deliveries) == (JobStatus.QUEUED, 0, 1)
    assert job.published_at is None
    assert job.publish_claimed_until is None
    assert job.waiting_reason == WaitingReason.PAUSED
    ((_, sent),) = effects.events
    assert sent["reason"] == DropReason.PAUSED


def test_engine_pausing_release_takes_only_what_no_pause_stops(
    job_factory: Callable[..., Job],
) -> None:
    engine = Engine(OrmBackend())
    pauses.pause(scope="kind", name="demo.flaky")
    pauses.pause(scope="queue", name="default")
    held = [job_factory(published_at=timezone.now()) for _ in range(2)]
    for job in held:
        assert engine.start(_deliver(job)) is None

    # the kind resumed, its queue still paused: nothing is released
    pauses.resume(scope="kind", name="demo.flaky")
    assert engine.release_held(Sweep(limit=10, claimer="leader")) == []

    # both resumed: both released, claimed for the leader, no longer waiting
    pauses.resume(scope="queue", name="default")
    released = engine.release_held(Sweep(limit=10, claimer="leader"))
    assert sorted(released) == sorted(job.id for job in held)
    assert engine.release_held(Sweep(limit=10, claimer="other")) == []  # claimed: once
    for job in held:
        job.refresh_from_db()
        assert (job.waiting_reason, job.publish_claimed_by) == ("", "leader")


def test_engine_pausing_hold_paused_returns_the_rest_and_costs_nothing_unpaused(
    job_factory: Callable[..., Job], django_assert_num_queries: Callable[..., Any]
) -> None:
    engine = Engine(OrmBackend())
    flaky = job_factory()
    sleep = job_factory(kind="demo.sleep")

    with django_assert_num_queries(1):  # the Pause table, empty
        assert engine.hold_paused([flaky.id, sleep.id]) == [flaky.id, sleep.id]

    pauses.pause(scope="kind", name="demo.flaky")
    assert engine.hold_paused([flaky.id, sleep.id]) == [sleep.id]
    flaky.refresh_from_db()
    assert flaky.waiting_reason == WaitingReason.PAUSED


def test_engine_pausing_a_lost_child_leaves_a_held_job_unpublished(
    job_factory: Callable[..., Job],
) -> None:
    engine = Engine(OrmBackend())
    job = job_factory(published_at=timezone.now() - timedelta(seconds=5))
    pauses.pause(scope="kind", name="demo.flaky")
    assert engine.start(_deliver(job)) is None

    engine.lose(
        Loss(job_id=job.id, attempt=1, worker_pid=None, message="child died before its start")
    )

    job.refresh_from_db()
    assert job.published_at is None
    assert job.waiting_reason == WaitingReason.PAUSED
