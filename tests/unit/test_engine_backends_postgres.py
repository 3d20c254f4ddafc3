"""jobs.engine.backends.postgres: the one-statement paths' Python side (the statements
themselves run in tests/integration/test_engine_statements.py on PostgreSQL)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from jobs.engine.backends.postgres import PostgresBackend, aware, savepoint_if_nested
from jobs.engine.values import AttemptRef, AttemptReport, Delivery, Effects
from jobs.models import AttemptOutcome, Job, JobStatus


def test_postgres_aware_reads_naive_utc_text() -> None:
    assert aware("2026-01-02 03:04:05.123456") == datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    with pytest.raises(ValueError, match="not a datetime"):
        aware("soon")


def test_postgres_leases_are_computed_once_per_settings(settings: Any) -> None:
    backend = PostgresBackend()
    first = backend.leases()

    assert backend.leases() is first
    settings.JOBS_LEASE_GRACE = settings.JOBS_LEASE_GRACE + 7
    assert backend.leases() is not first
    assert backend.leases()["demo.flaky"] == first["demo.flaky"] + 7


@pytest.mark.django_db
def test_postgres_savepoint_only_inside_a_transaction() -> None:
    with transaction.atomic(), savepoint_if_nested() as inner:
        assert inner is None or transaction.get_connection().in_atomic_block


@pytest.mark.django_db
def test_postgres_no_match_falls_back_to_the_orm_path(
    job_factory: Callable[..., Job], monkeypatch: pytest.MonkeyPatch
) -> None:
    # given statements that match nothing (as after a concurrent cancel)
    backend = PostgresBackend()
    monkeypatch.setattr(backend, "start_statement", lambda params: None)
    monkeypatch.setattr(backend, "finish_statement", lambda params: None)
    job = job_factory()

    # when an attempt starts and finishes
    started = backend.start(
        Delivery(job_id=job.id, attempt=1, hostname="w@h", pid=1),
        now=timezone.now(),
        effects=Effects(),
    )
    end = backend.finish(
        AttemptRef(job_id=job.id, number=1, started=started),
        AttemptReport(outcome=AttemptOutcome.SUCCEEDED),
        now=timezone.now(),
        effects=Effects(),
    )

    # then the ORM path did both
    assert end.status == JobStatus.SUCCEEDED
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
