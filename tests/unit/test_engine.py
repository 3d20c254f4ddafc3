"""jobs.engine: the engine chosen at startup, and events sent from its boundary after commit."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest
from django.apps import apps
from django.db import transaction

from jobs import engine, events
from jobs.engine import Engine
from jobs.engine.backends import OrmBackend, SqliteBackend
from jobs.engine.values import AttemptRef, AttemptReport, Delivery, JobRef, Sweep
from jobs.models import AttemptOutcome, Job, JobStatus

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sent() -> Iterator[list[str]]:
    """Names of the domain events sent, in order."""
    seen: list[str] = []
    signals = {
        "attempt_started": events.attempt_started,
        "attempt_finished": events.attempt_finished,
        "job_completed": events.job_completed,
        "delivery_dropped": events.delivery_dropped,
    }
    receivers = {}
    for name, signal in signals.items():
        receivers[name] = lambda n=name, **_: seen.append(n)
        signal.connect(receivers[name], dispatch_uid=f"test_engine_{name}")
    yield seen
    for name, signal in signals.items():
        signal.disconnect(dispatch_uid=f"test_engine_{name}")


def test_engine_current_is_the_one_chosen_at_startup() -> None:
    assert engine.current() is apps.get_app_config("jobs").engine  # type: ignore[attr-defined]
    assert isinstance(engine.current().backend, SqliteBackend)  # the unit tests run on SQLite
    assert Engine.for_vendor("mysql").backend.name == "orm"


@pytest.mark.parametrize("backend", [OrmBackend(), SqliteBackend()], ids=["orm", "sqlite"])
def test_engine_events_leave_after_commit_only(
    job_factory: Callable[..., Job], sent: list[str], backend: OrmBackend
) -> None:
    # given a queued job and an engine over either backend
    the_engine = Engine(backend)
    job = job_factory()

    # when an attempt starts and succeeds inside a caller's transaction
    with transaction.atomic():
        started = the_engine.start(
            Delivery(job_id=job.id, attempt=1, hostname="w@h", pid=os.getpid())
        )
        report = AttemptReport(outcome=AttemptOutcome.SUCCEEDED, result={"n": 1})
        end = the_engine.finish(AttemptRef(job_id=job.id, number=1, started=started), report)
        # then nothing was sent before the commit
        assert sent == []

    # and everything after it, in order
    assert end.status == JobStatus.SUCCEEDED
    assert sent == ["attempt_started", "attempt_finished", "job_completed"]


def test_engine_sends_nothing_when_the_transition_raises(
    job_factory: Callable[..., Job], sent: list[str]
) -> None:
    job = job_factory(status=JobStatus.SUCCEEDED)

    with pytest.raises(Exception, match="only queued"):
        engine.current().cancel(JobRef(job.id))

    assert sent == []


def test_engine_expire_leases_with_no_expired_lease_changes_nothing(
    job_factory: Callable[..., Job], sent: list[str]
) -> None:
    job_factory(status=JobStatus.RUNNING)

    assert engine.current().expire_leases(Sweep(limit=10)) == []
    assert sent == []


def test_engine_submitted_builds_an_unsaved_row() -> None:
    job = engine.current().submitted(delayed=False, run_after=None, kind="demo.flaky")

    assert job._state.adding
    assert (job.status, job.kind) == (JobStatus.QUEUED, "demo.flaky")


def test_engine_start_of_a_terminal_job_is_dropped_with_its_event(
    job_factory: Callable[..., Job], sent: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    job = job_factory(status=JobStatus.CANCELLED)

    dropped = engine.current().start(
        Delivery(job_id=job.id, attempt=1, hostname="w@h", pid=os.getpid())
    )

    assert dropped is None
    assert sent == ["delivery_dropped"]
    job.refresh_from_db()
    assert job.deliveries == 1
